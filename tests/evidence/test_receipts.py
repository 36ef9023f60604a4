"""Every decision is signed (contract §13): the receipt's claims, its place in the decision
answer and the step shape, and its signature checked by an independent oracle."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from django.test import Client

from approvals.services import step_decide
from envelopes.models import AuditEvent, Decision, Step
from envelopes.rfc3339 import rfc3339
from evidence.models import ReceiptKey
from tests.approvals.conftest import approval_envelope, post_envelope
from tests.conftest import AgentClient
from tests.reviewers.conftest import token_for

from .conftest import SEED_B64, oracle_claims

pytestmark = pytest.mark.django_db


def jwks(client: Client) -> dict[str, Any]:
    response = client.get("/.well-known/holdpoint/jwks.json")
    assert response.status_code == 200
    return response.json()


def test_an_approval_carries_a_receipt_that_names_what_was_approved(agent: AgentClient, make_reviewer: Any) -> None:
    rita = make_reviewer("rita", "reviewer")
    fingerprint = hashlib.sha256(b"refund 900").hexdigest()
    response = agent.attempt("run_7/charge_1", tool="charge_card", fingerprint=fingerprint)
    assert response.status_code == 201
    step = post_envelope(agent, approval_envelope(operation_ref="run_7/charge_1", attempt=1))
    version = Step.objects.get(pk=step.pk).version

    result = step_decide(team=step.team, step_id=step.pk, actor=rita, action="approve")

    header, claims = oracle_claims(result.decision.receipt, jwks(Client()))
    assert header["alg"] == "EdDSA" and header["kid"]
    assert claims == {
        "iss": "http://127.0.0.1:8000",
        "team": "acme",
        "operation_ref": "run_7/charge_1",
        "tool": "charge_card",
        "action": "approve",
        "input_fingerprint": fingerprint,
        "decided_by": "rita",
        "decided_at": rfc3339(result.decision.decided_at),
        "step_version": version + 1,
    }
    stored = Decision.objects.get(pk=result.decision.pk)
    assert stored.receipt == result.decision.receipt
    assert Step.objects.get(pk=step.pk).version == version + 1  # the version the receipt names
    # The decision's audit link carries it: the chain covers the receipt.
    link = AuditEvent.objects.get(step=step, kind="decision")
    assert link.data["receipt"] == stored.receipt


def test_a_rejection_is_signed_too_with_no_fingerprint(awaiting: Step, reviewer: Any) -> None:
    result = step_decide(team=awaiting.team, step_id=awaiting.pk, actor=reviewer, action="reject", reason="no")
    _, claims = oracle_claims(result.decision.receipt, jwks(Client()))
    assert (claims["action"], claims["input_fingerprint"], claims["decided_by"]) == ("reject", None, "rita")


def test_the_reviewer_api_answers_the_receipt_in_the_decision_and_the_step(awaiting: Step, reviewer: Any) -> None:
    api = token_for(reviewer)
    answer = api.decide("run_7/charge_1", {"action": "approve"}, etag=api.etag("run_7/charge_1"))
    assert answer.status_code == 201, answer.content
    body = answer.json()
    receipt = body["decision"]["receipt"]
    assert body["step"]["decisions"][-1]["receipt"] == receipt
    _, claims = oracle_claims(receipt, jwks(Client()))
    assert claims["operation_ref"] == "run_7/charge_1"
    assert api.step("run_7/charge_1").json()["decisions"][-1]["receipt"] == receipt


def test_the_agent_reads_the_receipt_in_its_step(awaiting: Step, reviewer: Any, agent: AgentClient) -> None:
    decided = step_decide(team=awaiting.team, step_id=awaiting.pk, actor=reviewer, action="approve")
    shape = agent.step("run_7/charge_1").json()
    assert shape["decisions"][-1]["receipt"] == decided.decision.receipt


def test_an_environment_key_signs_and_is_listed(settings: Any, awaiting: Step, reviewer: Any) -> None:
    settings.HOLDPOINT_RECEIPT_KEY = SEED_B64
    result = step_decide(team=awaiting.team, step_id=awaiting.pk, actor=reviewer, action="approve")
    keys = jwks(Client())
    header, _ = oracle_claims(result.decision.receipt, keys)
    stored = ReceiptKey.objects.get(kid=header["kid"])
    assert stored.seed == "" and stored.generation is None  # its seed stays in the environment
    # The kid is the RFC 7638 thumbprint of the key.
    from evidence.keys import thumbprint

    assert header["kid"] == thumbprint(stored.x)


def test_a_bad_environment_key_is_refused_without_saying_it(settings: Any, awaiting: Step, reviewer: Any) -> None:
    from django.core.exceptions import ImproperlyConfigured

    settings.HOLDPOINT_RECEIPT_KEY = "bm90LWEtc2VlZA=="  # "not-a-seed"
    with pytest.raises(ImproperlyConfigured) as refused:
        step_decide(team=awaiting.team, step_id=awaiting.pk, actor=reviewer, action="approve")
    assert "bm90LWEtc2VlZA" not in str(refused.value)
    assert not Decision.objects.filter(step=awaiting).exists()


def test_the_jwks_is_cacheable_and_public_only(client: Client, awaiting: Step, reviewer: Any) -> None:
    response = client.get("/.well-known/holdpoint/jwks.json")
    assert response["Content-Type"] == "application/jwk-set+json"
    assert "public" in response["Cache-Control"] and "max-age" in response["Cache-Control"]
    keys = response.json()["keys"]
    assert len(keys) == 1
    assert set(keys[0]) == {"kty", "crv", "x", "kid", "alg", "use"}  # no "d": never the private key
    again = client.get("/.well-known/holdpoint/jwks.json", HTTP_IF_NONE_MATCH=response["ETag"])
    assert again.status_code == 304
    assert client.post("/.well-known/holdpoint/jwks.json").status_code == 405


def test_migrate_alone_makes_one_key_at_first_use(awaiting: Step, reviewer: Any) -> None:
    assert not ReceiptKey.objects.exists()
    step_decide(team=awaiting.team, step_id=awaiting.pk, actor=reviewer, action="approve")
    assert ReceiptKey.objects.count() == 1
