"""End to end: the SDK against a real Holdpoint (pytest-django's live_server)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import httpx
import pytest
from django.db import connection
from holdpoint_sdk import Failure, Holdpoint, ToolError, Unauthorized, input_fingerprint
from pytest_django.live_server_helper import LiveServer

from accounts.services import api_key_create, reviewer_create, team_create
from approvals.services import step_decide
from envelopes.models import Step


@pytest.mark.django_db(transaction=True)
def test_an_agent_drives_the_real_api_through_the_sdk(live_server: LiveServer, request: pytest.FixtureRequest) -> None:
    team = team_create(slug="e2e")
    hp = Holdpoint(live_server.url, api_key_create(team=team, name="sdk").raw, timeout=5)
    # Closed at the end: a kept-alive connection keeps a server thread (and its DB session).
    request.addfinalizer(hp.close)
    invoice = {"customer": "cus_1", "amount": 1250}

    # A call that commits.
    done = hp.guarded_call(
        tool="create_invoice", operation_ref="e2e/1", input=invoice, run_id="e2e",
        call=lambda: {"invoice_id": "inv_1"},
    )  # fmt: skip
    assert done.ok and (done.step["state"], done.action) == ("succeeded", "stop")

    # Writing it again is refused by the gate: the call is not made.
    again = hp.guarded_call(tool="create_invoice", operation_ref="e2e/1", input=invoice, call=lambda: 1 / 0)
    assert again.refused and again.refusal is not None
    assert again.refusal.code == "already_committed"

    # A timeout after the request left: unknown, verified by operation_ref.
    def times_out() -> None:
        raise httpx.ReadTimeout("the provider did not answer")

    unknown = hp.guarded_call(tool="create_invoice", operation_ref="e2e/2", input=invoice, run_id="e2e", call=times_out)
    assert (unknown.step["state"], unknown.action) == ("verifying", "verify")
    verified = hp.report_verification("e2e/2", outcome="committed", evidence_ref="inv_2")
    assert verified["step"]["state"] == "succeeded"

    # An approval: the agent holds, a reviewer approves, the agent learns it by polling.
    def refund() -> None:
        raise ToolError(Failure.approval_required("REFUND_ABOVE_LIMIT", safe_details={"limit": 500}))

    held = hp.guarded_call(tool="refund", operation_ref="e2e/3", input={"amount": 900}, call=refund)
    assert (held.step["state"], held.action) == ("awaiting_approval", "hold")
    reviewer = reviewer_create(username="rita", password="x-unused-pw-1", team=team, role="reviewer")
    step_id = Step.objects.get(team=team, operation_ref="e2e/3").pk

    def approve_later() -> None:
        time.sleep(0.5)
        step_decide(team=team, step_id=step_id, actor=reviewer, action="approve")
        connection.close()

    approver = threading.Thread(target=approve_later)
    approver.start()
    decided = hp.wait_for_decision("e2e/3", timeout=20, initial_interval=0.1, max_interval=0.5)
    approver.join()
    assert decided["directive"] == {
        "action": "proceed", "may_write": True, "not_before": None, "reason": "approved",
    }  # fmt: skip
    assert [d["action"] for d in decided["decisions"]] == ["approve"]
    released = hp.guarded_call(
        tool="refund", operation_ref="e2e/3", input={"amount": 900}, call=lambda: {"refund": "re_1"}
    )
    assert released.ok and released.step["state"] == "succeeded"

    # A 429 from the provider: the step waits until an absolute not_before.
    limited = hp.guarded_call(
        tool="create_invoice", operation_ref="e2e/4", input=invoice, run_id="e2e",
        call=lambda: httpx.Response(429, headers={"Retry-After": "60"}),
    )  # fmt: skip
    assert (limited.step["state"], limited.action) == ("waiting_retry", "wait")
    assert limited.not_before is not None

    # Reads: the cursor iterates the run's steps; a conditional read costs a 304.
    assert {s["operation_ref"] for s in hp.list_steps(run_id="e2e", page_size=1)} == {
        "e2e/1", "e2e/2", "e2e/4",
    }  # fmt: skip
    first = hp.get_step_if_changed("e2e/4", etag=None)
    assert first.modified and not hp.get_step_if_changed("e2e/4", etag=first.etag).modified

    # A bad key is a typed error.
    with pytest.raises(Unauthorized), Holdpoint(live_server.url, "hp_wrong") as stranger:
        stranger.get_step("e2e/1")


@pytest.mark.django_db(transaction=True)
def test_the_guard_sends_its_input_and_falls_back_to_the_fingerprint_when_the_gate_refuses_it(
    live_server: LiveServer, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    team = team_create(slug="e2e-input")
    hp = Holdpoint(live_server.url, api_key_create(team=team, name="sdk").raw, timeout=5)
    request.addfinalizer(hp.close)

    # Sent: the reviewer's view of the step carries it, under the fingerprint the server recomputed.
    invoice = {"customer": "cus_1", "amount": 1250, "lines": [{"sku": "a", "qty": 0.1}]}
    sent = hp.guarded_call(tool="create_invoice", operation_ref="in/1", input=invoice, call=lambda: {"id": 1})
    assert sent.ok and sent.input_sent
    proposal = hp.get_step("in/1")["proposal"]
    assert proposal is not None
    assert (proposal["input"], proposal["input_fingerprint"]) == (invoice, input_fingerprint(invoice))

    # Refused by the gate (nested deeper than it takes): asked again with the fingerprint only,
    # so the write is still gated; the log says why.
    deep: dict[str, Any] = {"leaf": 1}
    for _ in range(40):
        deep = {"d": deep}
    with caplog.at_level(logging.WARNING, logger="holdpoint_sdk"):
        fallback = hp.guarded_call(tool="create_invoice", operation_ref="in/2", input=deep, call=lambda: {"id": 2})
    assert fallback.ok and not fallback.input_sent
    assert "refused the input of create_invoice on in/2 (max_depth)" in caplog.text
    step = Step.objects.get(team=team, operation_ref="in/2")
    assert step.state == "succeeded"
    refused_again = hp.guarded_call(tool="create_invoice", operation_ref="in/2", input=deep, call=lambda: 1 / 0)
    assert refused_again.refused and refused_again.refusal is not None
    assert refused_again.refusal.code == "already_committed"

    # Kept in the agent: only the fingerprint reaches Holdpoint.
    private = hp.guarded_call(
        tool="create_invoice", operation_ref="in/3", input={"iban": "DE89 3704"}, call=lambda: {"id": 3},
        send_input=False,
    )  # fmt: skip
    assert private.ok and not private.input_sent
    kept = hp.get_step("in/3").get("proposal")
    assert kept is None or kept["input"] is None
