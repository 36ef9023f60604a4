"""What a shape-valid envelope must not say (contract section 2): times out of bounds, and
fields that contradict each other. Pure Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from .validation import FieldError, as_datetime

# How far from the time of receipt a time may lie. Beyond these a time is a client's bug (a clock
# at 1970, a "never" written as 9999-12-31), and the timers computed from it would overflow.
# `occurred_at` and `checked_at` are in the past, give or take clock skew; `not_before` may lie
# ahead, up to a year.
TIME_PAST_LIMIT = timedelta(days=3653)
TIME_FUTURE_LIMITS = {"not_before": timedelta(days=366)}
TIME_SKEW_LIMIT = timedelta(days=1)


def time_window_error(name: str, value: datetime, now: datetime) -> str | None:
    """Why the time `value` of field `name` is out of bounds (None: within them)."""
    future = TIME_FUTURE_LIMITS.get(name.rpartition(".")[2], TIME_SKEW_LIMIT)
    if value < now - TIME_PAST_LIMIT:
        return f"{name} lies more than {TIME_PAST_LIMIT.days} days in the past"
    if value > now + future:
        return f"{name} lies more than {future.days} day{'s' if future.days != 1 else ''} in the future"
    return None


def time_errors(envelope: Mapping[str, Any], received_at: datetime) -> tuple[list[FieldError], list[str]]:
    """The times of a shape-valid envelope that are out of bounds (TIME_PAST_LIMIT...), and why."""
    retry, verification = envelope.get("retry") or {}, envelope.get("verification") or {}
    times = {
        "occurred_at": envelope.get("occurred_at"),
        "retry.not_before": retry.get("not_before"),
        "verification.checked_at": verification.get("checked_at"),
    }
    errors: list[FieldError] = []
    reasons: list[str] = []
    for name, value in times.items():
        reason = time_window_error(name, as_datetime(value), received_at) if value is not None else None
        if reason is not None:
            errors.append(FieldError(name, "time_window"))
            reasons.append(reason)
    return errors, reasons


# Contract section 2, "Consistency rules": when `field` has one of `values`, `then` must have one
# of `then_values` (None: must be present).
_CONSISTENCY_RULES: tuple[tuple[str, tuple[str, ...], str, tuple[Any, ...] | None], ...] = (
    ("commit_state", ("unknown",), "retry.directive", ("never",)),
    ("commit_state", ("unknown",), "next_action", ("verify_operation", "escalate")),
    ("next_action", ("wait_and_retry",), "retry.directive", ("after_delay",)),
    ("next_action", ("wait_and_retry",), "retry.not_before", None),
    ("next_action", ("wait_and_retry",), "commit_state", ("not_committed",)),
    ("next_action", ("correct_input",), "retry.directive", ("after_input_fix",)),
    ("next_action", ("correct_input",), "commit_state", ("not_committed",)),
    ("retry.directive", ("never",), "retry.max_attempts_remaining", (0,)),
    ("scope", ("resource",), "resource_id", None),
    ("commit_state", ("committed",), "retry.directive", ("never",)),
    ("next_action", ("request_approval",), "commit_state", ("not_committed",)),
)


def contradictions(envelope: Mapping[str, Any]) -> tuple[list[FieldError], list[str]]:
    """The broken consistency rules: one FieldError per field involved, one reason per rule."""
    if envelope.get("ok") is not False:
        return [], []
    retry = envelope["retry"]
    values = {
        "commit_state": envelope["commit_state"],
        "next_action": envelope["next_action"],
        "scope": envelope.get("scope", "request"),
        "resource_id": envelope.get("resource_id"),
        "retry.directive": retry["directive"],
        "retry.not_before": retry.get("not_before"),
        "retry.max_attempts_remaining": retry["max_attempts_remaining"],
    }
    errors: list[FieldError] = []
    reasons: list[str] = []
    for when, when_values, then, then_values in _CONSISTENCY_RULES:
        if values[when] not in when_values:
            continue
        if values[then] in then_values if then_values is not None else values[then]:
            continue
        errors += [FieldError(when, "consistency"), FieldError(then, "consistency")]
        wanted = " or ".join(map(str, then_values)) if then_values is not None else "set"
        reasons.append(f"{when} {values[when]} requires {then} {wanted}")
    return errors, reasons
