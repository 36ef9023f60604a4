"""What the hot path and the service wrote, without what differs by nature between two steps
(ids, refs, hashes, times), so the two can be compared field by field."""

from __future__ import annotations

from typing import Any

from django.core.cache import caches

from config.cache import HoldpointRedisCache


def door() -> int:
    """The statements of the API's door before a call's own: none with Holdpoint's Redis cache
    (the throttle counts in Redis, and the key, read by an earlier call, is remembered:
    envelopes.auth; limits.throttle chooses Redis by the same test), two without it (the key's
    read, the throttle window's upsert)."""
    return 0 if isinstance(caches["default"], HoldpointRedisCache) else 2


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
