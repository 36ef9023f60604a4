"""Membership (to accounts) and Decision (to envelopes) leave this app (issue 24): in migration
state only, their tables stay as they are."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_team_apikey_membership'),
        ('approvals', '0002_decision_input_fingerprint_edited'),
    ]
    run_before = [
        ('envelopes', '0012_team_apikey_out_decision_in'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name='membership',
                    name='team',
                ),
                migrations.RemoveField(
                    model_name='membership',
                    name='user',
                ),
                migrations.DeleteModel(
                    name='Decision',
                ),
                migrations.DeleteModel(
                    name='Membership',
                ),
            ],
        ),
    ]
