"""What one tool did in one hour, computed from the envelope and audit indexes.

The same computation fills the hourly rollups and answers the part of a window that is not
rolled up yet (its ragged edges and the last hour or so), so both give the same numbers.

Definitions (contract §6), over rows whose time falls in [start, end):
- envelopes: Envelope rows by received_at; `by_code` and `by_category` count error envelopes;
  an error envelope is documented when its code was in the catalog when it arrived.
- unknown_outcomes: transitions into `verifying` from another state.
- resolved_by_verification: transitions out of `verifying` caused by a verification report
  (reason verified_committed or verified_not_found: the rows whose effects list
  `resolved_by_verification`); a reviewer's "Mark committed" is not one.
- duplicate_writes_prevented: refusals with data.duplicate_prevented.
- terminal_escalations: transitions into `escalated` from another state (a step that is
  escalated again for another reason is not escalated twice).
- approvals: requested = transitions into `awaiting_approval` from another state; approved,
  rejected, expired = transitions with that reason; latency = time held in
  `awaiting_approval` before an approve or reject.
- pending recovery: the time held of every transition that leaves a held state.
- attempt_budget_exhausted: transitions with that reason.
- denied_by_rule, held_by_rule, approved_by_rule, approved_by_grant, granted_by_grant: the
  policy app's acts (RuleAct rows by `at`): a call refused or held by a rule, a held step
  approved by a rule or a grant, a call the gate let through on a grant.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from django.db.models import Count, Q
from django.db.models.functions import TruncHour

from envelopes.models import AuditEvent, Envelope, Tool
from envelopes.states import State
from policy.models import RuleAct

from . import histogram
from .activity import count_active_steps
from .counts import HourCounts

VERIFIED = frozenset({"verified_committed", "verified_not_found"})
DECIDED = frozenset({"approved", "rejected"})
ENTRY_COUNTERS = {
    State.VERIFYING.value: "unknown_outcomes",
    State.ESCALATED.value: "terminal_escalations",
    State.AWAITING_APPROVAL.value: "approvals_requested",
}
REASON_COUNTERS = {
    "approved": "approvals_approved",
    "rejected": "approvals_rejected",
    "approval_expired": "approvals_expired",
    "attempt_budget_exhausted": "attempt_budget_exhausted",
}
# RuleAct.outcome -> the counter.
ACT_COUNTERS = {
    "denied_by_rule": "denied_by_rule",
    "approval_required_by_rule": "held_by_rule",
    "approved_by_rule": "approved_by_rule",
    "approved_by_grant": "approved_by_grant",
    "granted_by_grant": "granted_by_grant",
}


Key = tuple[int, datetime]  # (tool_id, hour)


def aggregate_live(tool_ids: list[int], start: datetime, end: datetime) -> dict[Key, HourCounts]:
    """The counts of each (tool, hour) for rows in [start, end), from the indexes.

    Two grouped queries: envelopes on (tool, received_at), the audit log on
    (tool, kind, created_at); and the steps active in the range (metrics.activity). Cost grows
    with the rows in the range, never with the table.
    """
    result: dict[Key, HourCounts] = {}
    if not tool_ids or start >= end:
        return result

    def counts(tool_id: int, hour: datetime) -> HourCounts:
        found = result.get((tool_id, hour))
        if found is None:
            found = result[(tool_id, hour)] = HourCounts()
        return found

    envelope_groups = (
        Envelope.objects.filter(tool_id__in=tool_ids, received_at__gte=start, received_at__lt=end)
        .annotate(hour=TruncHour("received_at"))
        .values("tool_id", "hour", "ok", "code", "category", "next_action", "documented", "flags")
        .annotate(n=Count("id"))
        .order_by()
    )
    for envelope_group in envelope_groups:
        _count_envelopes(counts(envelope_group["tool_id"], envelope_group["hour"]), envelope_group)

    audit_groups = (
        AuditEvent.objects.filter(
            tool_id__in=tool_ids,
            kind__in=[AuditEvent.Kind.TRANSITION, AuditEvent.Kind.REFUSAL],
            created_at__gte=start,
            created_at__lt=end,
        )
        .annotate(hour=TruncHour("created_at"), bucket=histogram.bucket_expression())
        .values("tool_id", "hour", "kind", "before", "after", "reason", "bucket")
        .annotate(n=Count("id"), prevented=Count("id", filter=Q(data__duplicate_prevented=True)))
        .order_by()
    )
    for audit_group in audit_groups:
        _count_audit(counts(audit_group["tool_id"], audit_group["hour"]), audit_group)
    _count_acts(tool_ids, start, end, counts)
    count_active_steps(tool_ids, start, end, counts)
    return result


def _count_acts(
    tool_ids: list[int], start: datetime, end: datetime, counts: Callable[[int, datetime], HourCounts]
) -> None:
    """What rules and grants did, from RuleAct's (team, tool, at) index: acts name their tool by
    name, so the tools' (team, name) pairs are read first (one indexed read of the tools)."""
    tools = {
        (team_id, name): pk
        for pk, team_id, name in Tool.objects.filter(pk__in=tool_ids).values_list("pk", "team_id", "name")
    }
    acts = (
        RuleAct.objects.filter(
            team_id__in={team_id for team_id, _ in tools},
            tool__in={name for _, name in tools},
            at__gte=start,
            at__lt=end,
            outcome__in=list(ACT_COUNTERS),
        )
        .annotate(hour=TruncHour("at"))
        .values("team_id", "tool", "hour", "outcome")
        .annotate(n=Count("id"))
        .order_by()
    )
    for act in acts:
        tool_id = tools.get((act["team_id"], act["tool"]))
        if tool_id is not None:
            name = ACT_COUNTERS[act["outcome"]]
            found = counts(tool_id, act["hour"])
            setattr(found, name, getattr(found, name) + act["n"])


def _count_envelopes(counts: HourCounts, group: Mapping[str, Any]) -> None:
    n = group["n"]
    flags = group["flags"] or []
    counts.envelopes += n
    counts.redactions += n if "redacted" in flags else 0
    counts.suspicious_text += n if "suspicious_text" in flags else 0
    if group["ok"]:
        counts.successes += n
        return
    counts.errors += n
    counts.by_code[group["code"]] += n
    counts.by_category[group["category"]] += n
    if group["documented"]:
        counts.documented_errors += n
    else:
        counts._add_undocumented(
            group["code"], n, {group["category"]: n}, {group["next_action"] or "escalate": n}
        )


def _count_audit(counts: HourCounts, group: Mapping[str, Any]) -> None:
    n, before, after, reason = group["n"], group["before"], group["after"], group["reason"]
    if group["kind"] == AuditEvent.Kind.REFUSAL:
        counts.refusals += n
        counts.duplicate_writes_prevented += group["prevented"]
        return
    if after in ENTRY_COUNTERS and before != after:
        name = ENTRY_COUNTERS[after]
        setattr(counts, name, getattr(counts, name) + n)
    if reason in REASON_COUNTERS:
        name = REASON_COUNTERS[reason]
        setattr(counts, name, getattr(counts, name) + n)
    if before == State.VERIFYING.value and reason in VERIFIED:
        counts.resolved_by_verification += n
    if group["bucket"] is not None:
        bucket = str(group["bucket"])
        counts.recovery[bucket] += n
        if before == State.AWAITING_APPROVAL.value and reason in DECIDED:
            counts.approval_latency[bucket] += n
