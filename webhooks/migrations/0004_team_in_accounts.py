"""Foreign keys to Team now name accounts.Team (issue 24): in migration state only; the
columns and their constraints already point at envelopes_team, the table accounts.Team keeps."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_team_apikey_membership'),
        ('webhooks', '0003_outbox_retention_indexes'),
    ]
    run_before = [
        ('envelopes', '0012_team_apikey_out_decision_in'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='outboxmessage',
                    name='team',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts.team'),
                ),
                migrations.AlterField(
                    model_name='webhookendpoint',
                    name='team',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='webhook_endpoints', to='accounts.team'),
                ),
            ],
        ),
    ]
