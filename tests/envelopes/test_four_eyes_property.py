"""Under review is not approved (contract §3 v1.2, issue 23): no sequence of agent events,
timers and reviewer presses ever ends in a grant of an input that asked for approval unless
`required_approvals` (1..5, contract §12) distinct eligible reviewers approved that very input
since the step's last write; a reviewer outside the tool's approver group never counts.

Two tests of one property. The first runs the pure machine (`lifecycle.advance`) many times,
with the quorum modelled exactly as `approvals.services.step_decide` counts it (approvals of the
binding's fingerprint, or of an edit's, from distinct reviewers, given since the review started,
`Step.approvals_count_since`; only the approval that completes the count is fed to the
machine). The second drives the real services on the database (the ingest, the gate, the
verification, the timer sweep, `step_decide`), fewer times. Their oracle is the same and knows
nothing of the machine's fields: it only watches which inputs asked for approval, who approved
what, and what was granted.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from accounts.groups import group_member_add
from accounts.models import GroupMembership
from approvals.services import DecisionRefused, step_decide
from envelopes import lifecycle, services
from envelopes.configuration import tool_configure
from envelopes.errors import AttemptRefused, EnvelopeInvalid
from envelopes.lifecycle import (
    AttemptRequested,
    EnvelopeArrived,
    EnvelopeRejected,
    ReviewerActed,
    Snapshot,
    TimerFired,
    VerificationReported,
    advance,
    allowed_reviewer_actions,
)
from envelopes.models import Step
from envelopes.states import State
from tests.conftest import error_envelope

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
TTL = 3600
FINGERPRINTS = ("a" * 64, "b" * 64, "c" * 64)
REVIEWERS = ("alice", "bob", "carol", "dave", "erin", "frank")
FINANCE = frozenset(REVIEWERS[:5])  # the services' tool is held for finance: frank is outside it
NEXT_ACTIONS = ("correct_input", "wait_and_retry", "verify_operation", "request_approval", "escalate", "abort")

# One thing that happens to the step, and how many seconds after the one before. Weighted
# towards what makes a quorum (attempts, approvals by several people of few inputs) and away
# from what closes the step at once, so that sequences reach grants after approvals too.
KINDS = ["attempt"] * 4 + ["envelope"] * 3 + ["review"] * 6 + ["rejected"] * 2 + ["success", "verification", "sweep"]
ACTS = ["approve"] * 4 + ["edit_approve"] * 2 + ["permit_retry"] * 3 + ["reject", "mark_committed", "cancel"]
_VALUES = {
    # next_action (asking for approval most often), whether the budget has attempts left
    "envelope": st.tuples(st.sampled_from([*NEXT_ACTIONS, *["request_approval"] * 4]), st.booleans()),
    "success": st.just((None, None)),
    "rejected": st.just((None, None)),
    "attempt": st.tuples(st.sampled_from(FINGERPRINTS[:2]), st.none()),
    "verification": st.tuples(st.sampled_from(["committed", "not_found", "unavailable"]), st.none()),
    "sweep": st.just((None, None)),
    "review": st.tuples(st.sampled_from(ACTS), st.tuples(st.sampled_from(REVIEWERS), st.sampled_from(FINGERPRINTS))),
}
happenings = st.sampled_from(KINDS).flatmap(lambda kind: _VALUES[kind].map(lambda value: (kind, *value)))
moves = st.lists(st.tuples(happenings, st.sampled_from([0, 1, 30, 600, 4000])), min_size=1, max_size=40)


A, B, C = FINGERPRINTS
ASK = ("envelope", "request_approval", False)
# Issue 23's reproduction (one approval of two, a malformed envelope, Permit retry, the held
# input asked), its variant with nothing bound, and two legitimate releases: the round trip with
# a second reviewer after it, and an edit both reviewers approve. The generated sequences add the
# rest; these make sure every run takes the paths that matter.
THE_BYPASS = [
    (("attempt", A, None), 0),
    (ASK, 1),
    (("review", "approve", ("alice", A)), 30),
    (("rejected", None, None), 30),
    (("review", "permit_retry", ("alice", A)), 30),
    (("attempt", A, None), 1),
]
THE_BYPASS_UNBOUND = [
    (ASK, 0),
    (("rejected", None, None), 1),
    (("review", "permit_retry", ("alice", A)), 1),
    (("attempt", B, None), 1),
]
THE_ROUND_TRIP_RELEASED = [*THE_BYPASS, (("review", "approve", ("bob", A)), 30), (("attempt", A, None), 1)]
AN_EDIT_RELEASED = [
    (("attempt", A, None), 0),
    (ASK, 1),
    (("review", "edit_approve", ("alice", C)), 30),
    (("review", "edit_approve", ("bob", C)), 30),
    (("attempt", C, None), 1),
]
EXAMPLES = (THE_BYPASS, THE_BYPASS_UNBOUND, THE_ROUND_TRIP_RELEASED, AN_EDIT_RELEASED)


def with_examples(test: Any) -> Any:
    for sequence in EXAMPLES:
        test = example(sequence, 2)(test)
    return test


@dataclass
class Oracle:
    """What the property needs, from what happened only: the inputs that asked for approval
    since the last grant, and who approved which input since then."""

    required: int
    eligible: frozenset[str] = frozenset(REVIEWERS)
    asked: set[str] = field(default_factory=set)  # "" when nothing was bound
    approvers: dict[str, set[str]] = field(default_factory=dict)

    def held_for_approval(self, binding: str) -> None:
        self.asked.add(binding)

    def approved(self, reviewer: str, fingerprint: str) -> None:
        if reviewer in self.eligible:  # an approval from outside the group never counts
            self.approvers.setdefault(fingerprint, set()).add(reviewer)

    def granted(self, fingerprint: str) -> None:
        if self.asked:
            # A grant of an input under review needs its quorum: of that input, or, when the step
            # asked with nothing bound, of what its reviewers approved with nothing bound.
            counts = [len(self.approvers.get(fingerprint, ()))]
            if "" in self.asked:
                counts.append(len(self.approvers.get("", ())))
            assert max(counts) >= self.required, (fingerprint, self.asked, self.approvers)
            event("an input granted after its quorum")
        self.asked, self.approvers = set(), {}


def _envelope_event(next_action: str, budget: bool) -> EnvelopeArrived:
    # As services.envelope_event builds it from a valid envelope of that next_action.
    fields: dict[str, Any] = {
        "ok": False,
        "commit_state": "unknown" if next_action == "verify_operation" else "not_committed",
        "next_action": next_action,
        "max_attempts_remaining": 2 if budget and next_action in ("correct_input", "wait_and_retry") else 0,
        "approval_ttl_s": TTL,
    }
    if next_action == "wait_and_retry":
        fields["not_before"] = None  # filled with the event's time
    return EnvelopeArrived(**fields)


@dataclass
class PureStep:
    """The machine plus the quorum as approvals.services.step_decide counts it."""

    required: int
    snapshot: Snapshot = field(default_factory=lambda: Snapshot(max_attempts=5))
    state_entered_at: datetime = NOW
    decisions: list[tuple[str, str, datetime]] = field(default_factory=list)  # approvals: who, fp, when

    def apply(self, event: lifecycle.Event, now: datetime) -> lifecycle.Outcome:
        outcome = advance(self.snapshot, event, now)
        if outcome.after.state != self.snapshot.state:
            self.state_entered_at = now
        self.snapshot = outcome.after
        return outcome

    def decide(self, act: str, reviewer: str, edit: str, now: datetime) -> str | None:
        """The approved fingerprint when an approval was recorded, else None."""
        state = self.snapshot.state
        action = "approve" if act == "edit_approve" else act
        if state is None or action not in allowed_reviewer_actions(state):
            return None
        if action != "approve":
            self.apply(ReviewerActed(action, approval_ttl_s=TTL), now)
            return None
        edited = act == "edit_approve" and edit != self.snapshot.approval_fingerprint
        fingerprint = edit if edited else self.snapshot.approval_fingerprint
        since = self.snapshot.review_started_at or self.state_entered_at  # Step.approvals_count_since
        earlier = {who for who, fp, at in self.decisions if fp == fingerprint and at >= since}
        if reviewer in earlier:
            return None  # "You already approved this input"
        self.decisions.append((reviewer, fingerprint, now))
        if len(earlier) + 1 >= self.required:
            self.apply(ReviewerActed("approve", fingerprint=fingerprint if edited else None, approval_ttl_s=TTL), now)
        return fingerprint


@settings(max_examples=1500, deadline=None)
@example(THE_BYPASS, 2, "cancel")
@example(THE_BYPASS_UNBOUND, 2, "escalate")
@example(THE_ROUND_TRIP_RELEASED, 2, "cancel")
@example(AN_EDIT_RELEASED, 2, "escalate")
@given(moves, st.integers(1, 5), st.sampled_from(["cancel", "escalate"]))
def test_no_sequence_releases_an_input_under_review_without_its_quorum(sequence, required, expiry) -> None:
    step = PureStep(required=required)
    oracle = Oracle(required=required)
    now = NOW
    for (kind, value, extra), seconds in sequence:
        now += timedelta(seconds=seconds)
        before = step.snapshot
        if kind == "review":
            reviewer, edit = extra
            approved = step.decide(value, reviewer, edit, now)
            if approved is not None:
                oracle.approved(reviewer, approved)
        elif before.state is None and kind not in ("envelope", "success", "rejected", "attempt"):
            continue  # the services answer 404: only these create a step
        elif kind == "envelope":
            event = _envelope_event(value, extra)
            if value == "wait_and_retry":
                event = EnvelopeArrived(**{**event.__dict__, "not_before": now + timedelta(seconds=60)})
            step.apply(event, now)
        elif kind == "success":
            step.apply(EnvelopeArrived(ok=True, commit_state="committed"), now)
        elif kind == "rejected":
            step.apply(EnvelopeRejected(), now)
        elif kind == "attempt":
            outcome = step.apply(AttemptRequested(value, approval_ttl_s=TTL), now)
            if outcome.granted:
                oracle.granted(value)
        elif kind == "verification":
            step.apply(VerificationReported(value), now)
        else:  # the sweep, as services.step_fire_timer: the one due timer, if any
            timer = before.due_timer(now)
            if timer is not None:
                step.apply(TimerFired(timer, on_expiry=expiry), now)  # the tool's on_approval_expiry
        if step.snapshot.state is State.AWAITING_APPROVAL:
            oracle.held_for_approval(step.snapshot.approval_fingerprint)


# --- the same property through the real services, on the database ------------------------------


class Services:
    """One step driven through the services every door uses."""

    def __init__(self, team: Any, tool: str, reviewers: dict[str, Any]) -> None:
        self.team, self.tool, self.reviewers = team, tool, reviewers
        self.ref = f"prop/{uuid.uuid4().hex}"

    def step(self) -> Step | None:
        return Step.objects.filter(team=self.team, operation_ref=self.ref).first()

    def envelope(self, body: dict[str, Any]) -> None:
        body = {**body, "tool": self.tool, "operation_ref": self.ref}
        with contextlib.suppress(EnvelopeInvalid):  # quarantined; its step escalated (malformed_envelope)
            services.envelope_ingest(
                team=self.team, payload=body, dialect="canonical", raw_body=json.dumps(body).encode()
            )

    def attempt(self, fingerprint: str, input: dict[str, Any]) -> bool:
        try:
            services.attempt_request(
                team=self.team, operation_ref=self.ref, tool_name=self.tool, fingerprint=fingerprint, input=input
            )
        except AttemptRefused:
            return False
        return True

    def decide(self, act: str, reviewer: str, edit: dict[str, Any]) -> str | None:
        step = self.step()
        if step is None:
            return None
        action = "approve" if act == "edit_approve" else act
        try:
            result = step_decide(
                team=self.team,
                step_id=step.pk,
                actor=self.reviewers[reviewer],
                action=action,
                reason="property",
                edited_input=edit if act == "edit_approve" else None,
            )
        except (DecisionRefused, PermissionError):  # PermissionError: outside the group (§12)
            return None
        return result.decision.input_fingerprint if action == "approve" else None


def _body(next_action: str, budget: bool, now: datetime) -> dict[str, Any]:
    remaining = 2 if budget and next_action in ("correct_input", "wait_and_retry") else 0
    retry: dict[str, Any] = {"directive": "never", "max_attempts_remaining": 0}
    fields: dict[str, Any] = {"code": "SOME_ERROR", "category": "internal", "commit_state": "not_committed"}
    if next_action == "correct_input":
        retry = {"directive": "after_input_fix", "max_attempts_remaining": remaining}
    elif next_action == "wait_and_retry":
        retry = {
            "directive": "after_delay",
            "not_before": (now + timedelta(seconds=60)).isoformat(),
            "max_attempts_remaining": remaining,
        }
    elif next_action == "verify_operation":
        fields["commit_state"] = "unknown"
    return error_envelope(next_action=next_action, retry=retry, safe_details={}, **fields)


EDITS = {fp: {"amount": n} for n, fp in enumerate(FINGERPRINTS)}  # an edit per fingerprint slot


@pytest.mark.django_db
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@with_examples
@given(moves, st.integers(1, 5))
@example(AN_EDIT_RELEASED, 5)
@example(THE_ROUND_TRIP_RELEASED, 1)
def test_the_services_never_release_an_input_under_review_without_its_quorum(
    team, make_reviewer, sequence, required
) -> None:
    tool = "four_eyes"
    reviewers = {name: _reviewer(make_reviewer, name) for name in REVIEWERS}
    for name in FINANCE:
        if not GroupMembership.objects.filter(user=reviewers[name], group__name="finance").exists():
            group_member_add(team=team, name="finance", user=reviewers[name])
    tool_configure(
        team=team,
        name=tool,
        settings={
            "required_approvals": required,
            "approval_ttl_s": TTL,
            "max_attempts": 5,
            "approver_group": "finance",
            "on_approval_expiry": "escalate" if required % 2 else "cancel",
        },
        actor="test",
    )
    door = Services(team, tool, reviewers)
    oracle = Oracle(required=required, eligible=FINANCE)
    now = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    fingerprints = {fp: _fingerprint_of(EDITS[fp]) for fp in FINGERPRINTS}
    for (kind, value, extra), seconds in sequence:
        now += timedelta(seconds=seconds)
        with time_machine.travel(now, tick=False):
            before = door.step()
            if kind == "review":
                reviewer, edit = extra
                approved = door.decide(value, reviewer, EDITS[edit])
                if approved is not None:
                    oracle.approved(reviewer, approved)
            elif kind == "envelope":
                door.envelope(_body(value, extra, now))
            elif kind == "success":
                door.envelope({"ok": True, "commit_state": "committed"})
            elif kind == "rejected":
                door.envelope(error_envelope(category="not_a_category"))
            elif kind == "attempt":
                # The agent's inputs are the edits' own, so a reviewer's edit can be what it runs.
                if door.attempt(fingerprints[value], EDITS[value]):
                    oracle.granted(fingerprints[value])
            elif kind == "verification" and before is not None:
                services.verification_report(team=team, operation_ref=door.ref, outcome=value, checked_at=now, now=now)
            elif kind == "sweep" and before is not None:
                services.step_fire_timer(step_id=before.pk, now=now)
            after = door.step()
            if after is not None and after.state == "awaiting_approval":
                oracle.held_for_approval(after.approval_fingerprint)


def _reviewer(make_reviewer: Any, name: str) -> Any:
    from django.contrib.auth import get_user_model

    existing = get_user_model().objects.filter(username=name).first()
    return existing or make_reviewer(name)


def _fingerprint_of(value: dict[str, Any]) -> str:
    from envelopes.proposal import input_fingerprint

    return input_fingerprint(value)
