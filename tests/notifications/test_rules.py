"""The rules of §9, each with a controlled clock: what is announced, to which channel, when,
and how often. Messages go to a real local receiver that answers like Slack."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from accounts.models import Team
from envelopes.services import envelope_ingest
from notifications.models import Channel, Message, Notice
from notifications.services import channel_create
from notifications.tasks import notify
from tests.conftest import AgentClient
from tests.notifications.conftest import SlackReceiver, approval_envelope, hold, outage_envelope

pytestmark = pytest.mark.usefixtures("allow_private", "no_enqueue")


@pytest.fixture
def clock() -> Any:
    with time_machine.travel(datetime(2026, 11, 30, 9, 0, tzinfo=timezone.get_current_timezone()), tick=False) as t:
        yield t


def slack_channel(team: Team, slack: SlackReceiver, **options: Any) -> Channel:
    return channel_create(team=team, kind="slack", target=slack.url("/services/T000/B000/XXXX"), **options).channel


def texts(payload: dict[str, Any]) -> str:
    return json.dumps(payload["blocks"], ensure_ascii=False)


def test_the_first_event_goes_at_once_then_one_digest_per_window(
    team: Team, agent: AgentClient, slack: SlackReceiver, clock: Any
) -> None:
    slack_channel(team, slack)
    hold(agent, "run_1/a")
    notify()
    assert len(slack.received) == 1
    first = slack.payloads()[0]
    assert "Approval requested" in first["text"]
    assert "run_1/a" in texts(first)

    for n in range(14):
        hold(agent, f"run_1/b{n:02}")
    clock.shift(timedelta(seconds=30))
    notify()
    assert len(slack.received) == 1  # inside the window: nothing yet

    clock.shift(timedelta(seconds=31))
    notify()
    assert len(slack.received) == 2
    digest = slack.payloads()[1]
    body = texts(digest)
    assert "14 × Approval requested" in body
    assert "run_1/b00" in body and "run_1/b09" in body
    assert "run_1/b10" not in body  # the first ten steps only
    assert "and 4 more" in body
    slack.check()

    clock.shift(timedelta(seconds=120))
    notify()
    assert len(slack.received) == 2  # nothing new: nothing sent


def test_a_burst_of_a_thousand_approvals_in_a_minute_is_at_most_two_messages(
    team: Team, agent: AgentClient, slack: SlackReceiver, clock: Any
) -> None:
    slack_channel(team, slack)
    hold(agent, "burst/0")
    notify()  # what the on-commit enqueue does: the first goes at once
    for n in range(1, 1000):
        body = approval_envelope(operation_ref=f"burst/{n}")
        envelope_ingest(team=team, payload=body, dialect="canonical", raw_body=json.dumps(body).encode())
        if n % 20 == 0:
            clock.shift(timedelta(seconds=1))
            notify()
    clock.shift(timedelta(seconds=60))
    notify()
    notify()
    assert len(slack.received) == 2
    assert "and 989 more" in texts(slack.payloads()[1])


def test_channels_get_only_their_events_and_tools(
    team: Team, agent: AgentClient, slack: SlackReceiver, clock: Any
) -> None:
    invoices = slack_channel(team, slack, tools=["create_invoice"])
    escalations = slack_channel(team, slack, events=["step.escalated"])
    hold(agent, "run_1/card")  # charge_card, approval.requested
    hold(agent, "run_1/invoice", tool="create_invoice")
    assert list(Notice.objects.filter(channel=invoices).values_list("step__operation_ref", flat=True)) == [
        "run_1/invoice"
    ]
    assert not Notice.objects.filter(channel=escalations).exists()


def test_a_halted_tool_is_one_message_however_many_steps_it_holds(
    team: Team, agent: AgentClient, slack: SlackReceiver, clock: Any
) -> None:
    slack_channel(team, slack)
    for n in range(25):
        response = agent.envelope(outage_envelope(operation_ref=f"outage/{n}"))
        assert response.status_code == 201, response.content
    notify()
    clock.shift(timedelta(minutes=5))
    notify()
    assert len(slack.received) == 1
    body = texts(slack.payloads()[0])
    assert "Tool halted: charge_card" in body
    assert "25 held step(s)" in body
    slack.check()


def test_nothing_goes_out_for_a_step_decided_before_its_message(
    team: Team, agent: AgentClient, slack: SlackReceiver, clock: Any, make_reviewer: Any
) -> None:
    from approvals.services import step_decide

    slack_channel(team, slack)
    hold(agent, "run_1/first")
    notify()
    step = hold(agent, "run_1/second")  # waits for the window
    step_decide(team=team, step_id=step.pk, actor=make_reviewer("rita"), action="reject", reason="no")
    clock.shift(timedelta(seconds=61))
    notify()
    assert len(slack.received) == 1
    assert Notice.objects.get(step=step).status == Notice.Status.DROPPED


def test_reminders_come_every_remind_after_at_most_three_times_and_stop_when_decided(
    team: Team, agent: AgentClient, slack: SlackReceiver, clock: Any, make_reviewer: Any
) -> None:
    from approvals.services import step_decide

    slack_channel(team, slack, events=["approval.requested", "step.overdue"], batch_window_s=0)
    step = hold(agent, "run_1/slow")
    kept = hold(agent, "run_1/kept")
    notify()
    assert len(slack.received) == 1  # one message with both (the window is 0: no wait)

    def overdue_refs() -> list[str]:
        return list(
            Notice.objects.filter(event="step.overdue").order_by("id").values_list("step__operation_ref", flat=True)
        )

    clock.shift(timedelta(minutes=59))
    notify()
    assert overdue_refs() == []
    clock.shift(timedelta(minutes=1))
    notify()
    assert sorted(overdue_refs()) == ["run_1/kept", "run_1/slow"]
    step_decide(team=team, step_id=step.pk, actor=make_reviewer("rita"), action="reject", reason="no")
    for _ in range(5):
        clock.shift(timedelta(hours=1))
        notify()
    assert overdue_refs().count("run_1/slow") == 1  # none after the decision
    assert overdue_refs().count("run_1/kept") == 3  # at most three
    assert "Still waiting" in json.dumps(slack.payloads())
    assert kept.pk


def test_an_approval_expiring_is_announced_once_with_a_tenth_of_its_ttl_left(
    team: Team, agent: AgentClient, slack: SlackReceiver, clock: Any
) -> None:
    from envelopes.configuration import tool_configure

    hold(agent, "warmup")  # registers the tool
    tool_configure(team=team, name="charge_card", settings={"approval_ttl_s": 3000}, actor="test")
    slack_channel(team, slack, events=["approval.expiring"], batch_window_s=0)
    hold(agent, "run_1/short")  # TTL 50 min: warned with 5 min left
    clock.shift(timedelta(minutes=44))
    notify()
    assert not Notice.objects.filter(event="approval.expiring").exists()
    clock.shift(timedelta(minutes=1, seconds=1))
    notify()
    clock.shift(timedelta(minutes=1))
    notify()
    assert Notice.objects.filter(event="approval.expiring").count() == 1
    assert "Approval expiring" in slack.payloads()[-1]["text"]


def test_escalation_announces_a_step_still_held_on_the_second_channel_once(
    team: Team, agent: AgentClient, slack: SlackReceiver, clock: Any
) -> None:
    on_call = slack_channel(team, slack, name="on-call", events=["step.escalated"], batch_window_s=0)
    reviewers = slack_channel(team, slack, name="reviewers", escalate_to=on_call, escalate_after_s=1800)
    hold(agent, "run_1/ignored")
    notify()
    clock.shift(timedelta(minutes=29))
    notify()
    assert not Notice.objects.filter(channel=on_call).exists()
    clock.shift(timedelta(minutes=1))
    notify()
    for _ in range(3):
        clock.shift(timedelta(hours=1))
        notify()
    escalated = Notice.objects.get(channel=on_call)
    assert (escalated.event, escalated.escalated_from) == ("approval.requested", reviewers)
    assert Message.objects.filter(channel=on_call, status=Message.Status.SENT).count() == 1
    assert "escalated from: reviewers" in texts(slack.payloads()[-1])


def test_events_inside_a_window_ask_for_no_send_of_their_own(
    team: Team,
    agent: AgentClient,
    slack: SlackReceiver,
    clock: Any,
    no_enqueue: list[int],
    django_capture_on_commit_callbacks: Any,
) -> None:
    slack_channel(team, slack)

    def committed_hold(ref: str) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            hold(agent, ref)

    committed_hold("run_1/a")
    assert no_enqueue == [1]  # the window is open: send at once
    notify()
    for n in range(5):
        committed_hold(f"run_1/b{n}")
    assert no_enqueue == [1]  # inside the window: beat's sweep sends the digest at its end
    clock.shift(timedelta(seconds=61))
    committed_hold("run_1/c")
    assert no_enqueue == [1, 1]


def test_a_message_built_but_not_yet_sent_is_dropped_when_its_step_is_decided(
    team: Team, agent: AgentClient, slack: SlackReceiver, clock: Any, make_reviewer: Any
) -> None:
    from approvals.services import step_decide
    from notifications.services import channels_flush

    slack_channel(team, slack)
    step = hold(agent, "run_1/quick")
    channels_flush()  # the message is built; the worker has not sent it yet
    step_decide(team=team, step_id=step.pk, actor=make_reviewer("rita"), action="reject", reason="no")
    notify()
    assert slack.received == []
    assert Message.objects.get().status == Message.Status.DROPPED
