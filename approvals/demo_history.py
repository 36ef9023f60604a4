"""A week of past traffic for the demo team, so that the tool pages and the overview open on
full charts: emails sent, some refused and fixed, rate limits waited out, invoices whose outcome
was verified, refunds held for a reviewer and approved or rejected. Every row goes through the
services with its own `now`, as it would have happened then; the metrics rollups are then
rebuilt over the week. Seeded randomness, so two demo loads tell the same story."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from accounts.models import Team
from envelopes import errors, services
from envelopes.models import Step
from envelopes.proposal import input_fingerprint
from metrics.services import metrics_rollup
from policy.services import rules_replace

from .services import step_decide
from .similar import step_approve_with_grant

DAYS = 7
# The demo team's rules (contract §11): one that holds big refunds, one that approves small
# ones an agent asks about, a deny nobody should hit, and one in shadow, only counted.
DEMO_RULES: list[dict[str, Any]] = [
    {
        "name": "refunds-over-500",
        "description": "Refunds above 500.00 need a reviewer.",
        "tools": ["refund"],
        "when": "has(input.amount_cents) && input.amount_cents > 50000",
        "effect": "require_approval",
    },
    {
        "name": "small-refunds-ok",
        "description": "An agent asking about a refund of 200.00 or less needs no reviewer.",
        "tools": ["refund"],
        "when": "has(input.amount_cents) && input.amount_cents <= 20000",
        "effect": "allow",
    },
    {
        "name": "never-drop-tables",
        "description": "No agent drops a table.",
        "tools": ["*"],
        "when": 'tool in ["drop_table"]',
        "effect": "deny",
    },
    {
        "name": "external-email",
        "description": "Trying out: hold email to addresses outside example.com.",
        "tools": ["send_email"],
        "when": 'has(input.to) && !input.to.endsWith("@example.com")',
        "effect": "require_approval",
        "mode": "shadow",
    },
]
SLOTS_PER_DAY = 3  # one burst of agent traffic every eight hours


@dataclass
class _History:
    team: Team
    reviewers: list[User]
    rng: random.Random
    steps: int = 0

    def attempt(self, ref: str, tool: str, call: dict[str, Any], at: datetime, run_id: str) -> bool:
        try:
            services.attempt_request(
                team=self.team,
                operation_ref=ref,
                tool_name=tool,
                fingerprint=input_fingerprint(call),
                input=call,
                run_id=run_id,
                now=at,
            )
        except errors.AttemptRefused:
            return False
        return True

    def post(self, body: dict[str, Any], at: datetime) -> Any:
        try:
            return services.envelope_ingest(
                team=self.team, payload=body, dialect="canonical", raw_body=json.dumps(body).encode(), now=at
            )
        except errors.EnvelopeInvalid:
            return None


def _error(ref: str, tool: str, run_id: str, code: str, category: str, commit: str, action: str, **extra: Any) -> dict:
    directive = {"correct_input": "after_input_fix", "wait_and_retry": "after_delay"}.get(action, "never")
    return {
        "ok": False,
        "tool": tool,
        "operation_ref": ref,
        "run_id": run_id,
        "code": code,
        "category": category,
        "commit_state": commit,
        "retry": {"directive": directive, "max_attempts_remaining": 0 if directive == "never" else 2},
        "next_action": action,
        **extra,
    }


def _ok(ref: str, tool: str, run_id: str) -> dict[str, Any]:
    return {"ok": True, "tool": tool, "operation_ref": ref, "run_id": run_id, "commit_state": "committed"}


def _email(h: _History, ref: str, run_id: str, at: datetime) -> None:
    to = f"user{h.rng.randrange(900)}@example.com"
    roll = h.rng.random()
    if roll < 0.2:  # a typo in the address: refused, fixed, sent
        h.attempt(ref, "send_email", {"to": to.replace(".com", ".cmo")}, at, run_id)
        h.post(
            _error(
                ref, "send_email", run_id, "INVALID_RECIPIENT_ADDRESS", "validation", "not_committed", "correct_input"
            ),
            at + timedelta(seconds=2),
        )
        at += timedelta(minutes=h.rng.randrange(2, 40))
    elif roll < 0.35:  # the provider asked to slow down: waited out by the timer
        h.attempt(ref, "send_email", {"to": to}, at, run_id)
        body = _error(ref, "send_email", run_id, "RATE_LIMITED", "rate_limit", "not_committed", "wait_and_retry")
        body["retry"]["not_before"] = (at + timedelta(seconds=90)).isoformat()
        answer = h.post(body, at + timedelta(seconds=1))
        at += timedelta(minutes=2)
        if answer is not None:
            services.step_fire_timer(step_id=answer.step.pk, now=at)
    if h.attempt(ref, "send_email", {"to": to}, at, run_id):
        h.post(_ok(ref, "send_email", run_id), at + timedelta(seconds=3))


def _invoice(h: _History, ref: str, run_id: str, at: datetime) -> None:
    call = {"customer": f"c_{h.rng.randrange(100)}", "amount": f"{h.rng.randrange(50, 4000)}.00"}
    if not h.attempt(ref, "create_invoice", call, at, run_id):
        return
    if h.rng.random() < 0.3:  # the socket timed out after the write: looked up, then known
        h.post(
            _error(ref, "create_invoice", run_id, "OUTCOME_UNKNOWN", "dependency", "unknown", "verify_operation"),
            at + timedelta(seconds=30),
        )
        checked = at + timedelta(minutes=h.rng.randrange(6, 50))
        services.verification_report(
            team=h.team, operation_ref=ref, outcome="committed", checked_at=checked, now=checked
        )
    else:
        h.post(_ok(ref, "create_invoice", run_id), at + timedelta(seconds=4))


def _reviewed(h: _History, ref: str, at: datetime) -> datetime | None:
    """A reviewer decides the held refund some minutes later: when it was approved, the time
    the agent may run it; None when it was rejected (or nothing waited)."""
    held = Step.objects.filter(team=h.team, operation_ref=ref, state="awaiting_approval").first()
    if held is None:
        return at
    decided = at + timedelta(minutes=h.rng.randrange(1, 90))
    rejected = h.rng.random() < 0.2
    step_decide(
        team=h.team,
        step_id=held.pk,
        actor=h.rng.choice(h.reviewers),
        action="reject" if rejected else "approve",
        reason="Not the customer's order" if rejected else "Checked the order",
        now=decided,
    )
    return None if rejected else decided + timedelta(seconds=20)


def _refund(h: _History, ref: str, run_id: str, at: datetime) -> None:
    """Big refunds are held by the rule refunds-over-500 before they run and wait for a
    reviewer (without the rule, the agent asks for the approval itself, as agents did before);
    a small one the agent asks about is approved by small-refunds-ok at once."""
    amount = h.rng.randrange(500, 90000)
    call = {"customer": f"cus_{h.rng.randrange(40):03d}", "amount_cents": amount}
    granted = h.attempt(ref, "refund", call, at, run_id)
    if granted and (amount > 50000 or (amount <= 20000 and h.rng.random() < 0.5)):
        code = "REFUND_NEEDS_APPROVAL"
        ask = _error(ref, "refund", run_id, code, "authorization", "not_committed", "request_approval")
        h.post(ask, at + timedelta(seconds=2))
        granted = False
        at += timedelta(seconds=30)
    if not granted:
        ran = _reviewed(h, ref, at)
        if ran is None or not h.attempt(ref, "refund", call, ran, run_id):
            return
        at = ran
    h.post(_ok(ref, "refund", run_id), at + timedelta(seconds=2))


CALLS: list[tuple[str, Callable[[_History, str, str, datetime], None], int]] = [
    ("mail", _email, 1),
    ("inv", _invoice, 1),
    ("refund", _refund, 2),
]


def rules_load(*, team: Team, actor: str) -> None:
    """The demo's rule set, before its history, so the history went through it."""
    rules_replace(team=team, rules=DEMO_RULES, actor=actor, if_version=None)


def present_load(*, team: Team, reviewer: User, now: datetime) -> None:
    """Now: a big refund held by the rule (the step page says which rule, and offers "Approve and
    allow similar"), and a reviewer's grant for one customer that let two refunds through."""
    h = _History(team=team, reviewers=[reviewer], rng=random.Random(0))
    h.attempt("run_81/refund_1", "refund", {"customer": "cus_042", "amount_cents": 84000}, now, "run_81")
    h.attempt("run_81/refund_2", "refund", {"customer": "cus_007", "amount_cents": 61000}, now, "run_81")
    held = Step.objects.filter(team=team, operation_ref="run_81/refund_2", state="awaiting_approval").first()
    if held is None:  # no rule held it at the gate: the agent asks, as before rules
        body = _error(
            "run_81/refund_2", "refund", "run_81", "REFUND_NEEDS_APPROVAL", "authorization", "not_committed",
            "request_approval",
        )  # fmt: skip
        answer = h.post(body, now)
        held = answer.step if answer is not None else None
    if held is None:
        return
    step_approve_with_grant(
        team=team,
        step_id=held.pk,
        actor=reviewer,
        reason="cus_007's refunds were checked with billing today",
        grant={"when": 'input.customer == "cus_007"', "scope": "team", "expires_in_s": 24 * 3600, "max_uses": 20},
    )
    at = timezone.now()
    call = {"customer": "cus_007", "amount_cents": 61000}
    if h.attempt("run_81/refund_2", "refund", call, at, "run_81"):
        h.post(_ok("run_81/refund_2", "refund", "run_81"), at)
    for n, amount in ((3, 52000), (4, 77000)):
        ref = f"run_81/refund_{n}"
        if h.attempt(ref, "refund", {"customer": "cus_007", "amount_cents": amount}, at, "run_81"):
            h.post(_ok(ref, "refund", "run_81"), at)


def history_load(*, team: Team, reviewers: list[User], now: datetime, seed: int = 25) -> int:
    """Load DAYS days of traffic ending a few hours before `now`; returns the steps made."""
    h = _History(team=team, reviewers=reviewers, rng=random.Random(seed))
    start = now - timedelta(days=DAYS)
    with transaction.atomic():  # one commit, not one per service call: seconds, not a minute
        _play_week(h, start)
    metrics_rollup(now=now, rebuild_from=start)
    return h.steps


def _play_week(h: _History, start: datetime) -> None:
    for slot in range(DAYS * SLOTS_PER_DAY):
        at = start + timedelta(hours=slot * 24 // SLOTS_PER_DAY, minutes=h.rng.randrange(50))
        run_id = f"run_h{slot:02d}"
        for prefix, play, most in CALLS:
            for n in range(h.rng.randrange(1, most + 1)):
                play(h, f"{run_id}/{prefix}_{n}", run_id, at + timedelta(minutes=n * 3))
                h.steps += 1
