"""A property of every rule set (issue 25): evaluating it never grants a call that an enforced
deny matches (a failing deny counts as a match), and nothing but reviewers releases a step that
needs two approvals, whatever the rules, grants and call."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from policy import cel
from policy.evaluation import ALLOW, DENY, GRANT, CallFacts, gate_verdict, hold_verdict
from policy.models import Grant, Rule

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
WHENS = [
    "true",
    "false",
    "input.amount_cents > 50000",  # fails when the field is missing
    "has(input.amount_cents) && input.amount_cents <= 50000",
    'input.customer == "c_1"',
    'tool in ["refund"]',
    "attempt > 1",
    '!input.to.endsWith("@example.com")',
    "has_input && size(input) > 1",
]
TOOLS = ["refund", "send_email"]

inputs = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "amount_cents": st.integers(0, 100000),
            "customer": st.sampled_from(["c_1", "c_2"]),
            "to": st.sampled_from(["a@example.com", "b@evil.test"]),
        },
    ),
)


@st.composite
def rules(draw: st.DrawFn) -> list[Rule]:
    count = draw(st.integers(0, 8))
    return [
        Rule(
            id=n + 1,
            name=f"r{n}",
            version=1,
            tools=draw(st.sampled_from([["refund"], ["send_email"], ["*"], ["refund", "send_email"]])),
            when=draw(st.sampled_from(WHENS)),
            effect=draw(st.sampled_from(["deny", "require_approval", "allow"])),
            approvals=draw(st.integers(1, 5)),
            approvers="",
            mode=draw(st.sampled_from(["enforce", "shadow"])),
            enabled=draw(st.booleans()),
        )
        for n in range(count)
    ]


@st.composite
def grants(draw: st.DrawFn) -> list[Grant]:
    count = draw(st.integers(0, 3))
    return [
        Grant(
            id=100 + n,
            tool=draw(st.sampled_from(TOOLS)),
            when=draw(st.sampled_from(WHENS)),
            scope="team",
            scope_value="",
            created_by="rita",
            expires_at=NOW + timedelta(minutes=draw(st.integers(-5, 60))),
            max_uses=5,
            uses=draw(st.integers(0, 5)),
        )
        for n in range(count)
    ]


@st.composite
def calls(draw: st.DrawFn) -> CallFacts:
    value = draw(inputs)
    return CallFacts(
        tool=draw(st.sampled_from(TOOLS)),
        input=value,
        has_input=value is not None,
        run_id="run_1",
        key="agent",
        attempt=draw(st.integers(1, 3)),
        code="",
        state="",
        now=NOW,
    )


def deny_matches(rule_set: list[Rule], facts: CallFacts) -> bool:
    """The oracle: an enabled, enforced deny naming the tool whose `when` is true or fails."""
    activation = cel.activation_of(facts.bindings())
    for rule in rule_set:
        if not (rule.enabled and rule.mode == "enforce" and rule.effect == "deny"):
            continue
        if "*" not in rule.tools and facts.tool not in rule.tools:
            continue
        try:
            if cel.compile_when(rule.when).evaluate(activation):
                return True
        except cel.EvaluationError:
            return True
    return False


@settings(max_examples=400, deadline=None)
@given(rules(), grants(), calls())
def test_no_call_an_enforced_deny_matches_is_ever_granted(rule_set, grant_set, facts) -> None:  # type: ignore[no-untyped-def]
    denied = deny_matches(rule_set, facts)
    gate = gate_verdict(rule_set, grant_set, facts)
    assert (gate.effect == DENY) == denied
    for required in (1, 2):
        hold = hold_verdict(rule_set, grant_set, facts, approvals_required=required)
        assert (hold.effect == DENY) == denied
        if denied:
            assert hold.effect not in (GRANT, ALLOW)


@settings(max_examples=400, deadline=None)
@given(rules(), grants(), calls(), st.integers(2, 5))
def test_nothing_releases_a_step_needing_two_approvals(rule_set, grant_set, facts, required) -> None:  # type: ignore[no-untyped-def]
    assert hold_verdict(rule_set, grant_set, facts, approvals_required=required).effect not in (GRANT, ALLOW)


@settings(max_examples=400, deadline=None)
@given(rules(), grants(), calls())
def test_a_grant_or_allow_releases_only_a_one_approval_hold(rule_set, grant_set, facts) -> None:  # type: ignore[no-untyped-def]
    verdict = hold_verdict(rule_set, grant_set, facts, approvals_required=1)
    if verdict.effect in (GRANT, ALLOW):
        enforced_holds = [r for r in verdict.matched if r.effect == "require_approval" and r.approvals >= 2]
        assert enforced_holds == []
