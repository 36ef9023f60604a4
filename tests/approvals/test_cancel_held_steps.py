"""Cancel-all of a halted tool (approvals.services.tool_cancel_held_steps): the halt is re-checked
under the tool's lock before and during the run, and many steps are cancelled by a task that
drains the requests stored with the decision (approvals.models.CancelAllRequest)."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import kombu.exceptions
import pytest
from django.contrib.messages import get_messages
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from approvals import services
from approvals.models import CancelAllRequest
from approvals.services import ToolNoLongerHalted, tool_cancel_held_steps
from approvals.tasks import cancel_held_steps
from envelopes.audit import audit_verify
from envelopes.models import AuditEvent, Decision, Step, Tool
from outbound import doorbell
from tests.approvals.conftest import approval_envelope, outage_envelope, post_envelope
from tests.conftest import AgentClient
from tests.worker import Worker, wait_until


def halted_with_held_steps(agent: AgentClient, count: int) -> list[Step]:
    """charge_card halted by an outage: its own step plus `count` steps awaiting approval, all held."""
    # The outage's own step waits for its retry time (held too, so cancel-all cancels it).
    steps = [post_envelope(agent, outage_envelope(operation_ref="outage/0"))]
    steps += [post_envelope(agent, approval_envelope(operation_ref=f"held/{n}")) for n in range(count)]
    assert Tool.objects.get(name="charge_card").is_halted()
    return steps


def states(steps: list[Step]) -> list[str]:
    by_pk = dict(Step.objects.filter(pk__in=[s.pk for s in steps]).values_list("pk", "state"))
    return [by_pk[step.pk] for step in steps]


@pytest.fixture
def rings(db: None, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The task's publishes, captured; no doorbell mark left by an earlier test."""
    published: list[dict[str, Any]] = []
    monkeypatch.setattr(cancel_held_steps, "apply_async", lambda **kwargs: published.append(kwargs))
    doorbell.doorbell_answered(services.CANCEL_ALL_TASK)
    return published


@pytest.fixture
def broker_down(db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(**_: Any) -> None:
        raise kombu.exceptions.OperationalError("Error 111 connecting to 127.0.0.1:6399. Connection refused.")

    monkeypatch.setattr(cancel_held_steps, "apply_async", refuse)
    doorbell.doorbell_answered(services.CANCEL_ALL_TASK)


@pytest.mark.django_db
def test_a_resume_part_way_stops_the_rest(agent: AgentClient, reviewer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    steps = halted_with_held_steps(agent, 2)
    tool = Tool.objects.get(name="charge_card")
    real_decide = services.step_decide

    def decide_then_resume(**kwargs: Any) -> Any:
        result = real_decide(**kwargs)
        services.tool_resume_by_reviewer(team=tool.team, tool=tool, actor=reviewer, reason="provider is back")
        return result

    monkeypatch.setattr(services, "step_decide", decide_then_resume)

    result = tool_cancel_held_steps(team=tool.team, tool=tool, actor=reviewer, reason="outage")

    assert (result.cancelled, result.queued, result.resumed_midway) == (1, 0, True)
    assert states(steps) == ["cancelled", "awaiting_approval", "awaiting_approval"]
    assert Decision.objects.count() == 1
    assert AuditEvent.objects.filter(step=steps[0], kind="decision").count() == 1


@pytest.mark.django_db
def test_the_page_says_when_a_resume_stopped_it(
    rita: Client, agent: AgentClient, reviewer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    halted_with_held_steps(agent, 1)
    tool = Tool.objects.get(name="charge_card")
    real_decide = services.step_decide

    def decide_then_resume(**kwargs: Any) -> Any:
        result = real_decide(**kwargs)
        services.tool_resume_by_reviewer(team=tool.team, tool=tool, actor=reviewer)
        return result

    monkeypatch.setattr(services, "step_decide", decide_then_resume)

    response = rita.post("/tools/charge_card/cancel-held", {"team": "acme", "reason": "outage"})

    [flash] = [str(m) for m in get_messages(response.wsgi_request)]
    assert flash == (
        "charge_card was resumed part way: cancelled 1 held step; the others stay held. Decide them one by one."
    )


@pytest.mark.django_db
def test_a_resumed_tool_cancels_nothing(agent: AgentClient, reviewer: Any) -> None:
    steps = halted_with_held_steps(agent, 1)
    tool = Tool.objects.get(name="charge_card")
    services.tool_resume_by_reviewer(team=tool.team, tool=tool, actor=reviewer)

    with pytest.raises(ToolNoLongerHalted, match="charge_card is no longer halted"):
        tool_cancel_held_steps(team=tool.team, tool=tool, actor=reviewer, reason="outage")

    assert states(steps) == ["waiting_retry", "awaiting_approval"]
    assert not Decision.objects.exists()


@pytest.mark.django_db
def test_many_held_steps_are_cancelled_by_a_task_each_with_its_own_audit_link(
    rita: Client,
    agent: AgentClient,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
    rings: list[dict[str, Any]],
) -> None:
    monkeypatch.setattr(services, "CANCEL_ALL_INLINE_LIMIT", 2)
    steps = halted_with_held_steps(agent, 2)

    with django_capture_on_commit_callbacks(execute=True):
        response = rita.post("/tools/charge_card/cancel-held", {"team": "acme", "reason": "provider outage"})

    [flash] = [str(m) for m in get_messages(response.wsgi_request)]
    assert flash.startswith("Cancelling 3 held steps of charge_card: under way in the background")
    assert states(steps) == ["waiting_retry", "awaiting_approval", "awaiting_approval"]  # nothing yet
    assert len(rings) == 1  # the task, rung on commit
    [request] = CancelAllRequest.objects.pending()
    assert sorted(request.step_ids) == sorted(step.pk for step in steps)

    assert cancel_held_steps() == 3

    assert states(steps) == ["cancelled"] * 3
    for step in steps:
        assert AuditEvent.objects.filter(step=step, kind="decision").count() == 1
        assert AuditEvent.objects.filter(step=step, kind="transition", after="cancelled").count() == 1
    assert audit_verify() == []
    # A redelivered task changes nothing.
    assert cancel_held_steps() == 0
    assert Decision.objects.count() == 3
    assert not CancelAllRequest.objects.pending().exists()


@pytest.mark.django_db
def test_a_step_held_after_the_decision_is_not_cancelled_by_it(
    agent: AgentClient,
    reviewer: Any,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
    rings: list[dict[str, Any]],
) -> None:
    monkeypatch.setattr(services, "CANCEL_ALL_INLINE_LIMIT", 1)
    steps = halted_with_held_steps(agent, 1)
    tool = Tool.objects.get(name="charge_card")
    with django_capture_on_commit_callbacks(execute=True):
        tool_cancel_held_steps(team=tool.team, tool=tool, actor=reviewer, reason="outage")
    newcomer = post_envelope(agent, approval_envelope(operation_ref="held/late"))

    cancel_held_steps()

    assert states([*steps, newcomer]) == ["cancelled", "cancelled", "awaiting_approval"]


@pytest.mark.django_db
def test_with_the_broker_down_the_cancel_all_is_stored_and_the_task_cancels_it_once(
    rita: Client,
    agent: AgentClient,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
    broker_down: None,
) -> None:
    """The ring after commit cannot reach the broker: the page still answers, and the stored
    request is what beat's run of the task cancels."""
    monkeypatch.setattr(services, "CANCEL_ALL_INLINE_LIMIT", 2)
    steps = halted_with_held_steps(agent, 2)

    with django_capture_on_commit_callbacks(execute=True):
        response = rita.post("/tools/charge_card/cancel-held", {"team": "acme", "reason": "provider outage"})

    assert response.status_code == 303
    [flash] = [str(m) for m in get_messages(response.wsgi_request)]
    assert flash.startswith("Cancelling 3 held steps of charge_card: under way in the background")
    [request] = CancelAllRequest.objects.pending()
    assert (request.tool.name, request.actor.username, request.reason) == ("charge_card", "rita", "provider outage")
    assert sorted(request.step_ids) == sorted(step.pk for step in steps)
    assert states(steps) == ["waiting_retry", "awaiting_approval", "awaiting_approval"]

    assert cancel_held_steps() == 3
    assert cancel_held_steps() == 0

    assert states(steps) == ["cancelled"] * 3
    assert Decision.objects.count() == 3
    request.refresh_from_db()
    assert request.done_at is not None and request.cancelled == 3


@pytest.mark.django_db
def test_a_message_queued_by_the_previous_release_still_cancels_its_steps(agent: AgentClient, reviewer: Any) -> None:
    """A message published before the deploy carries the request itself: it is stored and run."""
    steps = halted_with_held_steps(agent, 2)
    tool = Tool.objects.get(name="charge_card")
    queued = {
        "team_id": tool.team_id,
        "tool_id": tool.pk,
        "actor_id": reviewer.pk,
        "reason": "provider outage",
        "step_ids": [step.pk for step in steps],
    }

    assert cancel_held_steps(**queued) == 3
    assert states(steps) == ["cancelled"] * 3
    assert not CancelAllRequest.objects.pending().exists()


@pytest.mark.django_db
def test_a_request_claimed_by_a_running_drain_is_left_to_it(
    agent: AgentClient, reviewer: Any, monkeypatch: pytest.MonkeyPatch, rings: list[dict[str, Any]]
) -> None:
    monkeypatch.setattr(services, "CANCEL_ALL_INLINE_LIMIT", 1)
    steps = halted_with_held_steps(agent, 1)
    tool = Tool.objects.get(name="charge_card")
    tool_cancel_held_steps(team=tool.team, tool=tool, actor=reviewer, reason="outage")
    request = CancelAllRequest.objects.get()
    lease_end = timezone.now() + timedelta(minutes=5)
    CancelAllRequest.objects.filter(pk=request.pk).update(claimed_until=lease_end)

    assert cancel_held_steps() == 0  # another drain runs it
    assert states(steps) == ["waiting_retry", "awaiting_approval"]

    # That drain died: once its lease is over, the next one runs the request.
    CancelAllRequest.objects.filter(pk=request.pk).update(claimed_until=timezone.now() - timedelta(seconds=1))
    assert cancel_held_steps() == 2
    assert states(steps) == ["cancelled", "cancelled"]


@pytest.mark.django_db
def test_a_tool_resumed_before_the_task_runs_cancels_nothing(
    agent: AgentClient, reviewer: Any, monkeypatch: pytest.MonkeyPatch, rings: list[dict[str, Any]]
) -> None:
    monkeypatch.setattr(services, "CANCEL_ALL_INLINE_LIMIT", 1)
    steps = halted_with_held_steps(agent, 1)
    tool = Tool.objects.get(name="charge_card")
    tool_cancel_held_steps(team=tool.team, tool=tool, actor=reviewer, reason="outage")
    services.tool_resume_by_reviewer(team=tool.team, tool=tool, actor=reviewer, reason="provider is back")

    assert cancel_held_steps() == 0

    assert states(steps) == ["waiting_retry", "awaiting_approval"]
    assert not CancelAllRequest.objects.pending().exists()  # the decision no longer stands


@pytest.mark.django_db(transaction=True)
def test_a_resume_while_a_step_is_being_decided_stops_the_run(agent: AgentClient, reviewer: Any) -> None:
    """A real race: the cancel-all waits on a step another transaction holds, the tool is
    resumed meanwhile, and the cancel-all stops at that step."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has no row locks to wait on")
    steps = halted_with_held_steps(agent, 2)
    tool = Tool.objects.get(name="charge_card")
    holding, release = threading.Event(), threading.Event()

    def hold_second_step() -> None:
        try:
            with transaction.atomic():
                Step.objects.select_for_update().get(pk=steps[1].pk)
                holding.set()
                assert release.wait(30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_second_step)
    holder.start()
    assert holding.wait(30)
    outcome: dict[str, Any] = {}

    def cancel_all() -> None:
        try:
            outcome["result"] = tool_cancel_held_steps(team=tool.team, tool=tool, actor=reviewer, reason="outage")
        finally:
            connection.close()

    canceller = threading.Thread(target=cancel_all)
    canceller.start()
    try:
        assert wait_until(lambda: states(steps)[0] == "cancelled", timeout=30)
        services.tool_resume_by_reviewer(team=tool.team, tool=tool, actor=reviewer, reason="provider is back")
    finally:
        release.set()
        holder.join(30)
        canceller.join(30)

    result = outcome["result"]
    assert (result.cancelled, result.resumed_midway) == (1, True)
    assert states(steps) == ["cancelled", "awaiting_approval", "awaiting_approval"]


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_cancels_many_held_steps(
    rita: Client, agent: AgentClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(services, "CANCEL_ALL_INLINE_LIMIT", 2)
    steps = halted_with_held_steps(agent, 3)

    with Worker(beat=False):
        response = rita.post("/tools/charge_card/cancel-held", {"team": "acme", "reason": "provider outage"})
        [flash] = [str(m) for m in get_messages(response.wsgi_request)]
        assert flash.startswith("Cancelling 4 held steps of charge_card: under way")

        assert wait_until(lambda: states(steps) == ["cancelled"] * 4, timeout=60), states(steps)

    assert set(Decision.objects.values_list("action", "reason", "reviewer__username")) == {
        ("cancel", "provider outage", "rita")
    }
    assert audit_verify() == []


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_cancels_a_cancel_all_the_broker_missed(
    rita: Client, agent: AgentClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ring is lost (the broker refused it); beat's run of the task cancels the steps."""
    monkeypatch.setattr(services, "CANCEL_ALL_INLINE_LIMIT", 2)
    steps = halted_with_held_steps(agent, 3)

    def refuse(**_: Any) -> None:
        raise kombu.exceptions.OperationalError("Connection refused.")

    monkeypatch.setattr(cancel_held_steps, "apply_async", refuse)
    doorbell.doorbell_answered(services.CANCEL_ALL_TASK)
    response = rita.post("/tools/charge_card/cancel-held", {"team": "acme", "reason": "provider outage"})
    assert response.status_code == 303
    assert CancelAllRequest.objects.pending().count() == 1
    monkeypatch.undo()  # the worker's beat publishes as usual

    with Worker(beat=True):
        assert wait_until(lambda: states(steps) == ["cancelled"] * 4, timeout=60), states(steps)
        assert wait_until(lambda: not CancelAllRequest.objects.pending().exists(), timeout=30)

    assert Decision.objects.count() == 4
    assert audit_verify() == []
