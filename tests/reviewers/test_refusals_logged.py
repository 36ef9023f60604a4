"""Abuse of the decision endpoint: a token of another team, a viewer's token, an expired or
revoked token, an unknown token, an agent key. Each is refused, nothing is decided, and each
refusal is logged without the credential."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from envelopes.models import AuditEvent, Decision, Step
from reviewers.models import ReviewerToken
from reviewers.services import reviewer_tokens_revoke
from tests.conftest import AgentClient
from tests.reviewers.conftest import ReviewerClient, token_for

pytestmark = pytest.mark.django_db

REF = "run_7/charge_1"


def test_each_abuse_is_refused_logged_and_the_log_holds_no_credential(
    caplog: pytest.LogCaptureFixture,
    awaiting: Step,
    agent: AgentClient,
    reviewer: Any,
    viewer: Any,
    make_reviewer: Any,
    other_team: Any,
) -> None:
    etag = f'"{awaiting.pk}.{awaiting.version}"'
    outsider = token_for(make_reviewer("otto", "reviewer", in_team=other_team))
    vic = token_for(viewer)
    expiring = token_for(reviewer, expires_at=timezone.now() + timedelta(minutes=5))
    revoked = token_for(reviewer)
    reviewer_tokens_revoke(ReviewerToken.objects.filter(token_hash=ReviewerToken.hash_token(revoked.raw_token)))
    unknown = ReviewerClient("hpr_" + "A" * 43)
    agent_key = ReviewerClient(agent.raw_key)
    credentials = [c.raw_token for c in (outsider, vic, expiring, revoked, unknown, agent_key)]
    caplog.set_level(logging.DEBUG)

    approve = {"action": "approve"}
    with time_machine.travel(timezone.now() + timedelta(minutes=6)):
        answers = {
            "another team": outsider.decide(REF, approve, etag=etag),
            "viewer": vic.decide(REF, approve, etag=etag),
            "expired": expiring.decide(REF, approve, etag=etag),
            "revoked": revoked.decide(REF, approve, etag=etag),
            "unknown": unknown.decide(REF, approve, etag=etag),
            "agent key": agent_key.decide(REF, approve, etag=etag),
        }

    assert {who: (r.status_code, r.json()["code"]) for who, r in answers.items()} == {
        "another team": (404, "not_found"),
        "viewer": (403, "role_required"),
        "expired": (401, "authentication_failed"),
        "revoked": (401, "authentication_failed"),
        "unknown": (401, "authentication_failed"),
        "agent key": (403, "reviewer_token_required"),
    }
    awaiting.refresh_from_db()
    assert awaiting.state == "awaiting_approval"
    assert not Decision.objects.exists()
    assert not AuditEvent.objects.filter(kind="decision").exists()

    logged = caplog.text
    assert "hpr_" not in logged
    assert "hp_" not in logged
    for credential in credentials:
        assert credential not in logged
    messages = [record.getMessage() for record in caplog.records]
    assert any("refused (expired)" in m for m in messages)
    assert any("refused (revoked)" in m for m in messages)
    assert any("unknown token refused" in m for m in messages)
    assert any("agent API key" in m and "refused" in m for m in messages)
    assert any("by vic" in m and "403 role_required" in m for m in messages)
    assert any("by otto" in m and "404 not_found" in m for m in messages)
