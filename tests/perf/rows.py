"""What the hot path and the service wrote, without what differs by nature between two steps
(ids, refs, hashes, times), so the two can be compared field by field."""

from __future__ import annotations

from typing import Any

VOLATILE = {"id", "step_id", "step", "envelope_id", "team_id", "operation_ref", "chain", "hash", "prev_hash"}
VOLATILE |= {"audit_head", "last_envelope_id", "url", "correlation_id", "created_at", "updated_at"}


def stable_row(instance: Any) -> dict[str, Any]:
    return {
        f.attname: getattr(instance, f.attname) for f in instance._meta.concrete_fields if f.attname not in VOLATILE
    }


def stable_shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: stable_shape(item) for key, item in value.items() if key not in VOLATILE}
    if isinstance(value, list):
        return [stable_shape(item) for item in value]
    return value
