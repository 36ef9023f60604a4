"""The Idempotency-Key table without its own index on `team`: its unique key (team, endpoint,
key) serves a team's rows. Only the index is dropped: Django's AlterField would also drop and
add the foreign key again, which checks every row under a lock that stops keyed calls."""

import django.db.models.deletion
from django.db import migrations, models

INDEX = "envelopes_idempotencyrecord_team_id_cd1ab29a"  # Django's name for the field's index


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0005_membership_away_delegate"),
        ("envelopes", "0020_decision_on_behalf_of"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="idempotencyrecord",
                    name="team",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="accounts.team",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    f"DROP INDEX IF EXISTS {INDEX}",
                    reverse_sql=f'CREATE INDEX {INDEX} ON "envelopes_idempotencyrecord" ("team_id")',
                ),
            ],
        ),
    ]
