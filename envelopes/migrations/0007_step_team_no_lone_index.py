import django.db.models.deletion
from django.db import migrations, models

# Only the index goes: AlterField would also drop and re-add the foreign key, which validates every
# step row under a lock. The name is the one Django gave the index on every backend.
INDEX = "envelopes_step_team_id_8fa30533"


class Migration(migrations.Migration):
    dependencies = [
        ("envelopes", "0006_attempt_input_proposed_input_audit_step_time"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="step",
                    name="team",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="steps",
                        to="envelopes.team",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    sql=f'DROP INDEX IF EXISTS "{INDEX}"',
                    reverse_sql=f'CREATE INDEX "{INDEX}" ON "envelopes_step" ("team_id")',
                ),
            ],
        ),
    ]
