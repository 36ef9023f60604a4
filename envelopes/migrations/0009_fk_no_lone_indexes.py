from typing import Any

import django.db.models.deletion
from django.db import migrations, models

# As 0007 and 0008: the lone index of each foreign key below goes, because another index of its
# table leads with the same column and serves every lookup (and the cascades) by it; each was one
# more index entry to write per row on the agent API's hot path (issue 14). Only the indexes go:
# AlterField would also drop and re-add the foreign keys, validating every row under a lock. The
# names are the ones Django gave the indexes on every backend.
CASCADE, PROTECT = django.db.models.deletion.CASCADE, django.db.models.deletion.PROTECT
NULLABLE: dict[str, Any] = {"blank": True, "null": True}
FOREIGN_KEYS: list[tuple[str, str, str, str, dict[str, Any]]] = [
    # (model, field, its lone index, the index that serves lookups by it, the field's options)
    ("attempt", "step", "envelopes_attempt_step_id_ea17da16", "attempt_unique_number_per_step",
     {"on_delete": CASCADE, "related_name": "attempt_set", "to": "envelopes.step"}),
    ("auditevent", "step", "envelopes_auditevent_step_id_7df2c427", "audit_step_seq_idx",
     {"on_delete": CASCADE, "related_name": "audit_events", "to": "envelopes.step", **NULLABLE}),
    ("auditevent", "tool", "envelopes_auditevent_tool_id_acd1adc1", "audit_tool_kind_time_idx",
     {"on_delete": CASCADE, "related_name": "+", "to": "envelopes.tool"}),
    ("domainevent", "step", "envelopes_domainevent_step_id_f56bb426", "domainevent_step_idx",
     {"on_delete": CASCADE, "related_name": "+", "to": "envelopes.step", **NULLABLE}),
    ("domainevent", "team", "envelopes_domainevent_team_id_256a9ef7", "domainevent_team_idx",
     {"on_delete": CASCADE, "related_name": "+", "to": "envelopes.team"}),
    ("envelope", "step", "envelopes_envelope_step_id_4404444b", "envelope_step_received_idx",
     {"on_delete": CASCADE, "related_name": "envelopes", "to": "envelopes.step"}),
    ("envelope", "team", "envelopes_envelope_team_id_729e6713", "envelope_team_correlation_idx",
     {"on_delete": CASCADE, "related_name": "envelopes", "to": "envelopes.team"}),
    ("envelope", "tool", "envelopes_envelope_tool_id_7e328474", "envelope_tool_received_idx",
     {"on_delete": PROTECT, "related_name": "envelopes", "to": "envelopes.tool"}),
]  # fmt: skip


class Migration(migrations.Migration):
    dependencies = [
        ("envelopes", "0008_tool_team_no_lone_index"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(model_name=model, name=field, field=models.ForeignKey(db_index=False, **options))
                for model, field, _, _, options in FOREIGN_KEYS
            ],
            database_operations=[
                migrations.RunSQL(
                    sql=f'DROP INDEX IF EXISTS "{index}"',
                    reverse_sql=f'CREATE INDEX "{index}" ON "envelopes_{model}" ("{field}_id")',
                )
                for model, field, index, _, _ in FOREIGN_KEYS
            ],
        ),
    ]
