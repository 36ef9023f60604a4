"""The core's event stream: one DomainEvent per change, in the change's transaction, handed to
every subscribed consumer (webhooks among them) so that a new consumer changes nothing below."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import transaction

from accounts.models import Team
from envelopes import events
from envelopes.events import DomainEvent, event_emit
from webhooks.models import OutboxMessage
from webhooks.services import endpoint_create


@pytest.fixture
def no_webhook_enqueue(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("webhooks.outbox.enqueue_delivery", lambda: None)


def test_an_event_is_stored_once_and_reaches_the_webhook_outbox_with_the_same_data(
    team: Team, settings: Any, no_webhook_enqueue: None
) -> None:
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = True
    endpoint_create(team=team, url="http://127.0.0.1:9/hook")
    built: list[int] = []

    def build() -> dict[str, Any]:
        built.append(1)
        return {"tool": "send_email", "reason": "UPSTREAM_DOWN", "until": None, "reviewer": None}

    event_id = event_emit(team_id=team.pk, event_type="tool.halted", data=build)

    event = DomainEvent.objects.get(pk=event_id)
    assert (event.team_id, event.type, event.tool, event.step_id) == (team.pk, "tool.halted", "send_email", None)
    assert built == [1]  # built once, for the stream and every consumer
    message = OutboxMessage.objects.get()
    body = json.loads(message.body)
    assert body["type"] == "tool.halted"
    assert body["data"] == event.data


def test_the_event_and_every_consumers_rows_roll_back_with_the_change(
    team: Team, settings: Any, no_webhook_enqueue: None
) -> None:
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = True
    endpoint_create(team=team, url="http://127.0.0.1:9/hook")
    with pytest.raises(RuntimeError), transaction.atomic():
        event_emit(team_id=team.pk, event_type="tool.resumed", data={"tool": "x"})
        raise RuntimeError("the transition failed")
    assert not DomainEvent.objects.exists()
    assert not OutboxMessage.objects.exists()


def test_a_new_consumer_only_subscribes(team: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events, "_consumers", list(events.consumers()))
    seen: list[tuple[str, dict[str, Any], int | None]] = []

    def audit_log_consumer(*, team_id: int, event_type: str, data: dict[str, Any], step_id: int | None = None) -> None:
        seen.append((event_type, data, step_id))

    events.subscribe(audit_log_consumer)
    events.subscribe(audit_log_consumer)  # a second subscription changes nothing
    event_emit(team_id=team.pk, event_type="tool.resumed", data={"tool": "x", "reviewer": "ana"})
    assert seen == [("tool.resumed", {"tool": "x", "reviewer": "ana"}, None)]


def test_a_consumer_that_fails_fails_the_change(team: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events, "_consumers", list(events.consumers()))

    def broken(**kwargs: Any) -> None:
        raise RuntimeError("cannot write my outbox")

    events.subscribe(broken)
    with pytest.raises(RuntimeError), transaction.atomic():
        event_emit(team_id=team.pk, event_type="tool.resumed", data={"tool": "x"})
    assert not DomainEvent.objects.exists()


def test_domain_events_are_append_only(team: Team) -> None:
    event = DomainEvent.objects.get(pk=event_emit(team_id=team.pk, event_type="tool.resumed", data={"tool": "x"}))
    event.type = "tool.halted"
    with pytest.raises(ValueError, match="append-only"):
        event.save()


def test_webhooks_subscribe_to_the_stream() -> None:
    from webhooks.outbox import event_emit as webhook_consumer

    assert webhook_consumer in events.consumers()


def test_a_transition_through_the_api_is_one_domain_event_with_the_step_shape(team: Team, agent: Any) -> None:
    from tests.conftest import error_envelope

    response = agent.envelope(error_envelope(operation_ref="run_9/stream"))
    assert response.status_code == 201
    (event,) = DomainEvent.objects.filter(type="step.state_changed")
    assert event.step_id is not None and event.tool == "send_email"
    assert event.data["step"]["operation_ref"] == "run_9/stream"
    assert event.data["step"]["state"] == response.json()["step"]["state"]


def test_the_core_imports_none_of_its_consumers() -> None:
    """The core writes its events and calls whoever subscribed: it never calls up into webhooks
    or notifications by name (issue 12, point 1)."""
    import ast
    from pathlib import Path

    above = {"webhooks", "notifications"}
    core = Path(__file__).resolve().parents[2] / "envelopes"
    offenders = []
    for path in core.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {name}" for name in names if name.split(".")[0] in above]
    assert offenders == []
