"""A grant's last use, raced with real threads and real transactions on PostgreSQL (contract
§11, issue 25 point 6): two calls taking the last use, or a use and a revoke, never give more
than `max_uses` uses."""

from __future__ import annotations

import hashlib

import pytest
import rfc8785

from envelopes.models import Attempt
from policy.models import Grant
from policy.services import grant_create, grant_revoke, rules_replace
from tests.conftest import AgentClient
from tests.envelopes.test_concurrency import run_together

pytestmark = pytest.mark.django_db(transaction=True)

INPUT = {"customer": "c_1", "amount_cents": 90000}
FP = hashlib.sha256(rfc8785.dumps(INPUT)).hexdigest()


def setup_grant(team, max_uses: int) -> Grant:  # type: ignore[no-untyped-def]
    rules_replace(
        team=team,
        rules=[
            {"name": "big", "tools": ["refund"], "when": "input.amount_cents > 50000", "effect": "require_approval"}
        ],
        actor="admin",
        if_version=None,
    )
    return grant_create(
        team=team,
        tool="refund",
        when='input.customer == "c_1"',
        scope="team",
        scope_value="",
        max_uses=max_uses,
        actor="rita",
    )


def attempt(agent: AgentClient, ref: str) -> int:
    client = AgentClient(agent.raw_key)
    return client.attempt(ref, tool="refund", fingerprint=FP, input=INPUT).status_code


def test_calls_racing_for_a_grants_last_uses_get_at_most_max_uses(agent: AgentClient, team) -> None:  # type: ignore[no-untyped-def]
    grant = setup_grant(team, max_uses=3)
    statuses = run_together([lambda n=n: attempt(agent, f"race-{n}") for n in range(8)])
    assert sorted(statuses) == [201] * 3 + [409] * 5, statuses
    grant.refresh_from_db()
    assert grant.uses == 3
    assert Attempt.objects.filter(grant__id=grant.pk).count() == 3


def test_a_use_racing_a_revoke_is_either_before_it_or_refused(agent: AgentClient, team, make_reviewer) -> None:  # type: ignore[no-untyped-def]
    for round_number in range(5):
        grant = setup_grant(team, max_uses=1)
        results = run_together(
            [
                lambda n=round_number: attempt(agent, f"revoke-{n}"),
                lambda grant=grant: grant_revoke(team=team, grant_id=grant.pk, actor="sam"),
            ]
        )
        status = results[0]
        grant.refresh_from_db()
        used = Attempt.objects.filter(grant__id=grant.pk).count()
        assert grant.revoked_at is not None
        assert grant.uses == used <= 1
        assert (status == 201) == (used == 1), results
