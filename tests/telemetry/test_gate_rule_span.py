"""The gate's span names the rule that decided its verdict (contract §13, "gate verdicts with
their rule"), exported to a real OTLP/HTTP receiver from this process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from accounts.models import Team
from telemetry import spans
from tests.conftest import AgentClient
from tests.policy.test_gate_api import LARGE, SMALL, call, rule, rules
from tests.worker import wait_until

from .otlp import OtlpReceiver

pytestmark = pytest.mark.django_db


@pytest.fixture
def otlp(settings) -> Iterator[OtlpReceiver]:  # type: ignore[no-untyped-def]
    receiver = OtlpReceiver()
    settings.OTEL_EXPORTER_OTLP_ENDPOINT = receiver.endpoint
    yield receiver
    receiver.close()


def test_a_deny_names_its_rule_and_a_grant_names_none(agent: AgentClient, team: Team, otlp: OtlpReceiver) -> None:
    rules(team, rule("no-big", "deny", "input.amount_cents > 50000"))
    traceparent = {"HTTP_TRACEPARENT": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    assert call(agent, "r1", LARGE, headers=traceparent).json()["code"] == "denied_by_rule"
    assert call(agent, "r2", SMALL, headers=traceparent).status_code == 201
    spans.flush()
    assert wait_until(lambda: len(otlp.named("holdpoint.gate")) == 2, timeout=10), otlp.spans

    denied, granted = sorted(otlp.named("holdpoint.gate"), key=lambda span: span.start_ns)
    assert denied.attributes["holdpoint.gate.verdict"] == "denied_by_rule"
    assert denied.attributes["holdpoint.gate.rule.name"] == "no-big"
    assert denied.attributes["holdpoint.gate.rule.version"] == 1
    assert granted.attributes["holdpoint.gate.verdict"] == "granted"
    assert "holdpoint.gate.rule.name" not in granted.attributes
