import django.db.models.deletion
from django.db import migrations, models

# As 0007 for the step: only the index goes (AlterField would also drop and re-add the foreign
# key). The name is the one Django gave the index on every backend.
INDEX = "envelopes_tool_team_id_c95d7dd0"


class Migration(migrations.Migration):
    dependencies = [
        ("envelopes", "0007_step_team_no_lone_index"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="tool",
                    name="team",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="tools",
                        to="envelopes.team",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    sql=f'DROP INDEX IF EXISTS "{INDEX}"',
                    reverse_sql=f'CREATE INDEX "{INDEX}" ON "envelopes_tool" ("team_id")',
                ),
            ],
        ),
    ]
