"""Spans exported to a real OTLP/HTTP receiver (contract §13): from gunicorn as deployed, the API
call, the gate verdict and the transition inside the agent's trace, the API call a child of the
agent's span; from a real Celery worker, a webhook try and a notification send, each linked to
the step's trace."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from accounts.models import Team
from accounts.services import api_key_create
from notifications.services import channel_create
from tests import worker
from tests.conftest import AgentClient, error_envelope, fingerprint
from tests.deploy.deployment import base_environment, gunicorn
from tests.webhooks.conftest import Receiver
from webhooks.services import endpoint_create

from .otlp import OtlpReceiver

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
AGENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{AGENT_SPAN}-01"
# Batches every 100 ms instead of every 5 s: the test waits for the spans, not for the clock.
FAST_BATCHES = {"OTEL_BSP_SCHEDULE_DELAY": "100"}

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


def test_a_gunicorn_process_exports_the_calls_spans_inside_the_agents_trace(team: Team, otlp: OtlpReceiver) -> None:
    key = api_key_create(team=team, name="agent").raw
    env = base_environment(
        worker.test_database_url(), HOLDPOINT_HTTPS="false", OTEL_EXPORTER_OTLP_ENDPOINT=otlp.endpoint, **FAST_BATCHES
    )
    headers = {"Authorization": f"Bearer {key}", "traceparent": TRACEPARENT, "tracestate": "vendor=opaque"}
    with gunicorn(env) as url:
        granted = httpx.post(
            f"{url}/api/v1/steps/run_1%2Fcharge/attempts",
            json={"tool": "charge_card", "input_fingerprint": fingerprint("one")},
            headers=headers,
            timeout=30,
        )
        assert granted.status_code == 201, granted.text
        refused = httpx.post(
            f"{url}/api/v1/steps/run_1%2Fcharge/attempts",
            json={"tool": "charge_card", "input_fingerprint": fingerprint("two")},
            headers={"Authorization": f"Bearer {key}"},  # no trace context: a root of its own
            timeout=30,
        )
        assert refused.status_code == 409
        assert worker.wait_until(lambda: len(otlp.named("holdpoint.gate")) == 2, timeout=30), otlp.spans

    assert otlp.paths and set(otlp.paths) == {"/v1/traces"}
    traced = [span for span in otlp.spans if span.trace_id == TRACE]
    (api,) = [span for span in traced if span.name.startswith("POST ")]
    assert api.name == "POST /api/v1/steps/<path:ref>/attempts"
    assert api.parent_span_id == AGENT_SPAN  # a child of the agent's span
    assert api.kind == 2  # SERVER
    assert api.attributes["http.response.status_code"] == 201
    assert api.service == "holdpoint"
    (gate,) = [span for span in traced if span.name == "holdpoint.gate"]
    assert gate.parent_span_id == api.span_id
    assert gate.attributes["holdpoint.gate.verdict"] == "granted"
    assert gate.attributes["holdpoint.step.operation_ref"] == "run_1/charge"
    (transition,) = [span for span in traced if span.name == "holdpoint.transition"]
    assert transition.parent_span_id == gate.span_id
    assert transition.attributes["holdpoint.step.state"] == "in_progress"
    assert transition.attributes["holdpoint.transition.cause"] == "attempt"
    # The untraced call: its own trace, the verdict the refusal's code.
    (other_gate,) = [span for span in otlp.named("holdpoint.gate") if span.trace_id != TRACE]
    assert other_gate.attributes["holdpoint.gate.verdict"] == "verification_required"
    (other_api,) = [span for span in otlp.spans if span.span_id == other_gate.parent_span_id]
    assert other_api.parent_span_id == "" and other_api.attributes["http.response.status_code"] == 409


@pytest.mark.worker
def test_a_worker_exports_its_tries_and_sends_linked_to_the_steps_trace(
    team: Team, agent: AgentClient, otlp: OtlpReceiver, receiver: Receiver, settings
) -> None:  # type: ignore[no-untyped-def]
    from config.celery import app

    app.control.purge()
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = True
    endpoint_create(team=team, url=receiver.url("/hooks/holdpoint"))
    channel_create(team=team, kind="webhook", target=receiver.url("/hooks/notify"), batch_window_s=0)
    env = {"HOLDPOINT_WEBHOOK_ALLOW_PRIVATE": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint, **FAST_BATCHES}
    with worker.Worker(env=env):
        held = agent.envelope(
            error_envelope(
                code="AMOUNT_OVER_LIMIT",
                category="authorization",
                retry={"directive": "never", "max_attempts_remaining": 0},
                next_action="request_approval",
            ),
            HTTP_TRACEPARENT=TRACEPARENT,
        )
        assert held.status_code == 201, held.content
        assert held.json()["step"]["trace_id"] == TRACE
        assert worker.wait_until(
            lambda: otlp.named("holdpoint.webhook.try") and otlp.named("holdpoint.notification.send"), timeout=45
        ), (otlp.spans, receiver.received)

    paths = {received.path for received in receiver.received}
    assert {"/hooks/holdpoint", "/hooks/notify"} <= paths
    (webhook_try, *_) = otlp.named("holdpoint.webhook.try")
    assert webhook_try.links == [(TRACE, AGENT_SPAN)]  # linked to the step's trace, not inside it
    assert webhook_try.trace_id != TRACE and webhook_try.parent_span_id == ""
    assert webhook_try.attributes["http.response.status_code"] == 200
    assert webhook_try.attributes["holdpoint.delivered"] is True
    (send, *_) = otlp.named("holdpoint.notification.send")
    assert send.links == [(TRACE, AGENT_SPAN)]
    assert send.attributes["holdpoint.notification.kind"] == "webhook"
    assert send.attributes["holdpoint.delivered"] is True
