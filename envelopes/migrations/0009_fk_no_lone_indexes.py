import django.db.models.deletion
from django.db import migrations, models

# As 0007 and 0008: the lone index of each foreign key below goes, because another index of its
# table leads with the same column and serves every lookup (and the cascades) by it; each was one
# more index entry to write per row on the agent API's hot path (issue 14). Only the indexes go:
# AlterField would also drop and re-add the foreign keys, validating every row under a lock. The
# names are the ones Django gave the indexes on every backend.
INDEXES = {
    # index: (table, column, the index that serves lookups by the column)
    "envelopes_attempt_step_id_ea17da16": ("envelopes_attempt", "step_id", "attempt_unique_number_per_step"),
    "envelopes_auditevent_step_id_7df2c427": ("envelopes_auditevent", "step_id", "audit_step_seq_idx"),
    "envelopes_auditevent_tool_id_acd1adc1": ("envelopes_auditevent", "tool_id", "audit_tool_kind_time_idx"),
    "envelopes_domainevent_step_id_f56bb426": ("envelopes_domainevent", "step_id", "domainevent_step_idx"),
    "envelopes_domainevent_team_id_256a9ef7": ("envelopes_domainevent", "team_id", "domainevent_team_idx"),
    "envelopes_envelope_step_id_4404444b": ("envelopes_envelope", "step_id", "envelope_step_received_idx"),
    "envelopes_envelope_team_id_729e6713": ("envelopes_envelope", "team_id", "envelope_team_correlation_idx"),
    "envelopes_envelope_tool_id_7e328474": ("envelopes_envelope", "tool_id", "envelope_tool_received_idx"),
}


def _unindexed(**options):  # type: ignore[no-untyped-def]
    return models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, **options)


class Migration(migrations.Migration):
    dependencies = [
        ("envelopes", "0008_tool_team_no_lone_index"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="attempt",
                    name="step",
                    field=_unindexed(related_name="attempt_set", to="envelopes.step"),
                ),
                migrations.AlterField(
                    model_name="auditevent",
                    name="step",
                    field=_unindexed(blank=True, null=True, related_name="audit_events", to="envelopes.step"),
                ),
                migrations.AlterField(
                    model_name="auditevent",
                    name="tool",
                    field=_unindexed(related_name="+", to="envelopes.tool"),
                ),
                migrations.AlterField(
                    model_name="domainevent",
                    name="step",
                    field=_unindexed(blank=True, null=True, related_name="+", to="envelopes.step"),
                ),
                migrations.AlterField(
                    model_name="domainevent",
                    name="team",
                    field=_unindexed(related_name="+", to="envelopes.team"),
                ),
                migrations.AlterField(
                    model_name="envelope",
                    name="step",
                    field=_unindexed(related_name="envelopes", to="envelopes.step"),
                ),
                migrations.AlterField(
                    model_name="envelope",
                    name="team",
                    field=_unindexed(related_name="envelopes", to="envelopes.team"),
                ),
                migrations.AlterField(
                    model_name="envelope",
                    name="tool",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="envelopes",
                        to="envelopes.tool",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    sql=f'DROP INDEX IF EXISTS "{index}"',
                    reverse_sql=f'CREATE INDEX "{index}" ON "{table}" ("{column}")',
                )
                for index, (table, column, _) in INDEXES.items()
            ],
        ),
    ]
