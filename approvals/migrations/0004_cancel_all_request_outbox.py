"""Cancel-alls of many held steps become outbox rows that a task drains (issue 23, stop 30)."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_team_apikey_membership'),
        ('approvals', '0003_membership_decision_out'),
        ('envelopes', '0012_team_apikey_out_decision_in'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='CancelAllRequest',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('reason', models.TextField()),
                ('step_ids', models.JSONField()),
                ('requested_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('claimed_until', models.DateTimeField(blank=True, null=True)),
                ('done_at', models.DateTimeField(blank=True, null=True)),
                ('cancelled', models.PositiveIntegerField(default=0)),
                ('actor', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('team', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts.team')),
                ('tool', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='envelopes.tool')),
            ],
            options={
                'indexes': [models.Index(condition=models.Q(('done_at__isnull', True)), fields=['requested_at'], name='cancelall_pending_idx')],
            },
        ),
    ]
