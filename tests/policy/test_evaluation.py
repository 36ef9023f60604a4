"""policy.evaluation: §11's order at the gate and on a hold, fail-closed errors, shadow rules."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from policy.evaluation import (
    ALLOW,
    DENY,
    GRANT,
    REQUIRE_APPROVAL,
    CallFacts,
    gate_verdict,
    hold_verdict,
    review_denial,
)
from policy.models import Grant, Rule

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
_ids = itertools.count(1)


def rule(effect: str, when: str, *, tools: list[str] | None = None, mode: str = "enforce", **extra: object) -> Rule:
    number = next(_ids)
    return Rule(
        id=number,
        name=f"r{number}",
        version=1,
        tools=tools or ["refund"],
        when=when,
        effect=effect,
        mode=mode,
        enabled=bool(extra.pop("enabled", True)),
        **extra,
    )


def grant(when: str = "true", **extra: object) -> Grant:
    fields: dict[str, object] = {
        "id": next(_ids),
        "tool": "refund",
        "when": when,
        "scope": "team",
        "scope_value": "",
        "created_by": "rita",
        "expires_at": NOW + timedelta(hours=1),
        "max_uses": 20,
        "uses": 0,
    }
    return Grant(**(fields | extra))


def call(amount: int = 60000, **extra: object) -> CallFacts:
    fields: dict[str, object] = {
        "tool": "refund",
        "input": {"amount_cents": amount, "customer": "c_1"},
        "has_input": True,
        "run_id": "run_1",
        "key": "agent",
        "attempt": 1,
        "code": "",
        "state": "",
        "now": NOW,
        "key_id": 7,
    }
    return CallFacts(**(fields | extra))  # type: ignore[arg-type]


BIG = "input.amount_cents > 50000"


def test_no_rules_no_verdict() -> None:
    verdict = gate_verdict([], [], call())
    assert verdict.effect is None
    assert verdict.evaluated == 0


def test_an_enforced_deny_beats_a_live_grant_and_a_hold() -> None:
    deny = rule(DENY, BIG)
    verdict = gate_verdict([rule(REQUIRE_APPROVAL, "true"), deny], [grant()], call())
    assert verdict.effect == DENY
    assert verdict.rule is deny


def test_a_live_grant_beats_a_require_approval() -> None:
    live = grant()
    verdict = gate_verdict([rule(REQUIRE_APPROVAL, BIG)], [live], call())
    assert verdict.effect == GRANT
    assert verdict.grant is live


def test_require_approval_needs_the_most_approvals_of_the_matching_rules() -> None:
    one = rule(REQUIRE_APPROVAL, BIG)
    three = rule(REQUIRE_APPROVAL, "true", approvals=3, approvers="finance")
    verdict = gate_verdict([one, three, rule(REQUIRE_APPROVAL, "false", approvals=5)], [], call())
    assert verdict.effect == REQUIRE_APPROVAL
    assert verdict.rule is three
    assert (verdict.approvals, verdict.approvers) == (3, "finance")


def test_allow_rules_do_nothing_at_the_gate() -> None:
    verdict = gate_verdict([rule(ALLOW, "true")], [], call())
    assert verdict.effect is None
    assert verdict.evaluated == 0


def test_rules_of_other_tools_and_disabled_rules_are_not_evaluated() -> None:
    rules = [rule(DENY, "true", tools=["send_email"]), rule(DENY, "true", enabled=False)]
    verdict = gate_verdict(rules, [], call())
    assert verdict.effect is None
    assert verdict.evaluated == 0


def test_a_star_rule_names_every_tool() -> None:
    assert gate_verdict([rule(DENY, "true", tools=["*"])], [], call()).effect == DENY


def test_a_failing_deny_fails_closed() -> None:
    deny = rule(DENY, "input.missing > 1")
    verdict = gate_verdict([deny], [], call())
    assert verdict.effect == DENY
    assert verdict.errors and verdict.errors[0][0] is deny


def test_a_failing_require_approval_fails_closed() -> None:
    verdict = gate_verdict([rule(REQUIRE_APPROVAL, "input.missing > 1")], [], call())
    assert verdict.effect == REQUIRE_APPROVAL


def test_a_failing_allow_does_not_match() -> None:
    verdict = hold_verdict([rule(ALLOW, "input.missing > 1")], [], call(), approvals_required=1)
    assert verdict.effect is None
    assert len(verdict.errors) == 1


def test_a_failing_grant_does_not_match() -> None:
    verdict = gate_verdict([], [grant("input.missing > 1")], call())
    assert verdict.effect is None
    assert len(verdict.errors) == 1


def test_a_shadow_rule_is_counted_and_never_acts() -> None:
    shadow = rule(DENY, BIG, mode="shadow")
    verdict = gate_verdict([shadow], [], call())
    assert verdict.effect is None
    assert verdict.shadow == ((shadow, DENY),)


def test_a_grant_that_is_expired_revoked_or_used_up_does_not_match() -> None:
    grants = [
        grant(expires_at=NOW),
        grant(revoked_at=NOW - timedelta(minutes=1)),
        grant(uses=20),
        grant(tool="send_email"),
    ]
    assert gate_verdict([], grants, call()).effect is None


def test_a_grant_covers_its_scope_only() -> None:
    by_run = grant(scope="run", scope_value="run_1")
    by_key = grant(scope="key", scope_value="7")
    assert gate_verdict([], [by_run], call()).grant is by_run
    assert gate_verdict([], [by_run], call(run_id="run_2")).effect is None
    assert gate_verdict([], [by_run], call(run_id="")).effect is None
    assert gate_verdict([], [by_key], call()).grant is by_key
    assert gate_verdict([], [by_key], call(key_id=8)).effect is None


def test_an_excluded_grant_is_skipped_for_the_next() -> None:
    first, second = grant(), grant()
    assert gate_verdict([], [first, second], call(), exclude_grants=[first.id]).grant is second


def test_on_a_hold_a_deny_sends_the_proposal_back() -> None:
    verdict = hold_verdict([rule(DENY, BIG)], [grant()], call(), approvals_required=1)
    assert verdict.effect == DENY


def test_on_a_one_approval_hold_a_grant_or_an_allow_approves() -> None:
    live = grant()
    assert hold_verdict([rule(ALLOW, "true")], [live], call(), approvals_required=1).grant is live
    allow = rule(ALLOW, BIG)
    assert hold_verdict([allow], [], call(), approvals_required=1).rule is allow


def test_nothing_releases_a_hold_needing_two_approvals() -> None:
    verdict = hold_verdict([rule(ALLOW, "true")], [grant()], call(), approvals_required=2)
    assert verdict.effect is None


def test_a_require_approval_for_two_on_a_hold_raises_its_quorum() -> None:
    hold = rule(REQUIRE_APPROVAL, BIG, approvals=2)
    verdict = hold_verdict([hold, rule(ALLOW, "true")], [grant()], call(), approvals_required=1)
    assert verdict.effect == REQUIRE_APPROVAL
    assert verdict.approvals == 2


def test_a_matching_require_approval_keeps_an_allow_from_releasing_but_not_a_grant() -> None:
    hold = rule(REQUIRE_APPROVAL, BIG, approvers="finance")
    verdict = hold_verdict([hold, rule(ALLOW, "true")], [], call(), approvals_required=1)
    assert (verdict.effect, verdict.rule, verdict.approvals, verdict.approvers) == (
        REQUIRE_APPROVAL,
        hold,
        1,
        "finance",
    )
    live = grant()
    assert hold_verdict([hold], [live], call(), approvals_required=1).grant is live


def test_a_reviewer_cannot_approve_what_an_enforced_deny_matches() -> None:
    deny = rule(DENY, BIG)
    assert review_denial([deny, rule(DENY, "true", mode="shadow")], call()).rule is deny
    assert review_denial([deny], call(amount=100)).effect is None
