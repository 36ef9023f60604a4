"""Each kind of channel against a real receiver: email through an SMTP server (aiosmtpd) parsed
back with the email package, Slack against a receiver checking its incoming-webhook shape, the
webhook channel signed as §5 (checked with the standardwebhooks library). Messages are useful
(everything a reviewer needs, the step's link) and safe (no secret, agent text as text)."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from accounts.models import Team
from envelopes.proposal import input_fingerprint
from notifications.models import Channel, Message, SendTry
from notifications.sending import message_send, messages_claim, try_record
from notifications.services import channel_create, channels_flush
from notifications.tasks import notify
from tests.conftest import AgentClient
from tests.notifications.conftest import REFUND_INPUT, Inbox, SlackReceiver, expected_mac, hold, hold_proposing
from tests.webhooks.conftest import Answer, Receiver, TricklingReceiver

pytestmark = pytest.mark.usefixtures("allow_private", "no_enqueue")

HOSTILE = "<!channel> <@U123> *bold* <https://evil.example|click> & <b>html</b>"


def test_an_email_carries_everything_a_reviewer_needs_in_text_and_html(
    team: Team, agent: AgentClient, smtp: Inbox, make_reviewer: Any, settings: Any
) -> None:
    settings.HOLDPOINT_BASE_URL = "https://holdpoint.example.com"
    rita = make_reviewer("rita", "reviewer")
    rita.email = "rita@example.com"
    rita.save()
    viewer = make_reviewer("vic", "viewer")
    viewer.email = "vic@example.com"
    viewer.save()
    channel_create(team=team, kind="email", target="@reviewers")
    step = hold(
        agent,
        "run_7/charge <b>9</b>",
        correlation_id="corr-<i>42</i>",
        safe_details={"limit": "1000", "field": HOSTILE},
    )
    notify()

    assert len(smtp.messages) == 1
    mail = smtp.messages[0]
    assert smtp.envelopes[0].rcpt_tos == ["rita@example.com"]  # reviewers and admins, not viewers
    assert "Approval requested" in mail["Subject"] and "charge_card" in mail["Subject"]
    text = mail.get_body(preferencelist=("plain",)).get_content()
    html = mail.get_body(preferencelist=("html",)).get_content()
    for expected in (
        "acme",
        "charge_card",
        "AMOUNT_OVER_LIMIT",
        "approval_pending",
        "run_7/charge <b>9</b>",
        "corr-<i>42</i>",
        "limit: 1000",
        f"https://holdpoint.example.com/steps/{step.pk}/",
        "age",
        "expires",
    ):
        assert expected in text, expected
    assert "run_7/charge &lt;b&gt;9&lt;/b&gt;" in html
    assert "&lt;b&gt;html&lt;/b&gt;" in html and "<b>html</b>" not in html
    assert f'href="https://holdpoint.example.com/steps/{step.pk}/"' in html
    assert Channel.objects.get().last_success_at is not None


def test_slack_gets_block_kit_with_agent_text_as_text(team: Team, agent: AgentClient, slack: SlackReceiver) -> None:
    channel_create(team=team, kind="slack", target=slack.url("/services/T0/B0/secretpath"))
    hold(agent, "run_7/<!here>", safe_details={"field": HOSTILE})
    notify()

    slack.check()
    payload = slack.payloads()[0]
    raw = slack.received[0].body.decode()
    assert "<!channel>" not in raw and "<@U123>" not in raw and "<!here>" not in raw
    assert "&lt;!channel&gt; &lt;@U123&gt;" in raw
    for block in payload["blocks"]:
        for text in _text_objects(block):
            if text["type"] == "mrkdwn":
                # mrkdwn only ever holds Holdpoint's own links, never agent text.
                assert "*bold*" not in text["text"] and "U123" not in text["text"] and "run_7" not in text["text"]
            else:
                assert text.get("emoji") is False
    assert "*bold*" in raw  # shown, as plain text
    assert any("Open the step page" in json.dumps(block) for block in payload["blocks"])


def _text_objects(block: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    if isinstance(block.get("text"), dict):
        found.append(block["text"])
    found.extend(block.get("fields", []))
    found.extend(element for element in block.get("elements", []) if element.get("type") in ("mrkdwn", "plain_text"))
    return found


def test_a_webhook_channel_signs_with_its_own_secret(team: Team, agent: AgentClient, receiver: Receiver) -> None:
    created = channel_create(team=team, kind="webhook", target=receiver.url("/hooks/notify"))
    step = hold(agent)
    notify()

    request = receiver.received[0]
    body = Webhook(created.secret).verify(request.body, request.headers)
    assert body["type"] == "approval.requested"
    assert body["data"]["team"] == "acme"
    (facts,) = body["data"]["steps"]
    assert facts["operation_ref"] == step.operation_ref and facts["code"] == "AMOUNT_OVER_LIMIT"
    assert facts["url"].endswith(f"/steps/{step.pk}/")
    assert request.headers["webhook-id"].startswith("ntf_")


def test_a_receiver_that_is_down_delays_only_its_own_channel(
    team: Team, agent: AgentClient, slack: SlackReceiver, receiver: Receiver
) -> None:
    channel_create(team=team, kind="slack", target=slack.url())
    down = channel_create(team=team, kind="webhook", target=receiver.url()).channel
    receiver.answer(Answer(status=503), Answer(status=503))
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        hold(agent)
        notify()
        assert len(slack.received) == 1
        message = Message.objects.get(channel=down)
        assert (message.status, message.tries) == (Message.Status.PENDING, 1)
        # The §5 schedule: about 5 s, then about 5 min.
        assert timedelta(seconds=4) <= message.next_try_at - start <= timedelta(seconds=6)
        clock.shift(timedelta(seconds=6))
        notify()
        message.refresh_from_db()
        assert timedelta(minutes=4) <= message.next_try_at - timezone.now() <= timedelta(minutes=6)
        clock.shift(timedelta(minutes=6))
        notify()
    message.refresh_from_db()
    assert message.status == Message.Status.SENT
    assert list(SendTry.objects.filter(message=message).values_list("ok", flat=True)) == [False, False, True]
    down.refresh_from_db()
    assert down.last_success_at is not None and down.last_error == "HTTP 503"
    assert "secret" not in down.last_error and receiver.url() not in down.last_error


def test_a_410_disables_the_channel(team: Team, agent: AgentClient, receiver: Receiver) -> None:
    gone = channel_create(team=team, kind="webhook", target=receiver.url()).channel
    receiver.answer(Answer(status=410))
    hold(agent)
    notify()
    gone.refresh_from_db()
    assert gone.disabled and gone.disabled_reason == "410 Gone"
    hold(agent, "run_1/after")
    assert not gone.notices.filter(step__operation_ref="run_1/after").exists()


@pytest.mark.parametrize(
    "secret",
    [
        "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlc2lnbmF0dXJl",
        "AKIAIOSFODNN7EXAMPLE",
        "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c",
        "postgres://admin:hunter2hunter2@db.internal:5432/prod",
        "password=correct-horse-battery-staple",
    ],
)
def test_no_secret_reaches_any_channel(
    team: Team,
    agent: AgentClient,
    smtp: Inbox,
    slack: SlackReceiver,
    receiver: Receiver,
    secret: str,
    make_reviewer: Any,
) -> None:
    admin = make_reviewer("ada", "admin")
    admin.email = "ada@example.com"
    admin.save()
    channel_create(team=team, kind="email", target="@reviewers")
    channel_create(team=team, kind="slack", target=slack.url())
    channel_create(team=team, kind="webhook", target=receiver.url())
    hold(agent, safe_details={"field": f"amount; token {secret}", "limit": "1000"})
    notify()
    mail = smtp.messages[0]
    sent = [
        mail["Subject"],
        mail.get_body(preferencelist=("plain",)).get_content(),
        mail.get_body(preferencelist=("html",)).get_content(),
        slack.received[0].body.decode(),
        receiver.received[0].body.decode(),
    ]
    assert all("[REDACTED:" in text for text in sent[1:]), sent
    core = secret.split("=")[-1].split("@")[0].split(" ")[-1]
    for text in sent:
        assert core not in text


def test_each_send_is_on_the_steps_timeline(team: Team, agent: AgentClient, receiver: Receiver) -> None:
    from approvals.timeline import step_timeline
    from notifications.models import Notice

    channel_create(team=team, kind="webhook", target=receiver.url(), name="ops hook")
    receiver.answer(Answer(status=502))
    step = hold(agent)
    with time_machine.travel(timezone.now(), tick=False) as clock:
        notify()
        clock.shift(timedelta(seconds=10))
        notify()
    sends = [entry.item for entry in step_timeline(step).entries if entry.kind == "notification"]
    assert [(send.ok, send.message.channel.label, send.error) for send in sends] == [
        (False, "ops hook", "HTTP 502"),
        (True, "ops hook", ""),
    ]
    notices = Notice.objects.filter(step_id=step.pk, message__in={send.message_id for send in sends})
    assert set(notices.values_list("event", flat=True)) == {"approval.requested"}


def test_with_slack_signing_configured_an_approval_carries_approve_and_reject(
    team: Team, agent: AgentClient, slack: SlackReceiver, settings: Any
) -> None:
    channel_create(team=team, kind="slack", target=slack.url(), batch_window_s=0)
    hold(agent, "run_1/without")
    notify()
    assert "actions" not in {block["type"] for block in slack.payloads()[0]["blocks"]}

    settings.SLACK_SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
    step = hold_proposing(agent, "run_1/with")
    notify()
    slack.check()
    (actions,) = [block for block in slack.payloads()[1]["blocks"] if block["type"] == "actions"]
    approve, reject, similar, page = actions["elements"]
    assert (approve["action_id"], approve["text"]["text"]) == ("holdpoint.approve", "Approve")
    value = json.loads(approve["value"])
    fingerprint = input_fingerprint(REFUND_INPUT)
    assert value == {
        "team": "acme",
        "operation_ref": "run_1/with",
        "etag": f'"{step.pk}.{step.version}"',
        "fp": fingerprint[:12],
        "mac": expected_mac(
            team="acme", operation_ref="run_1/with", etag=f'"{step.pk}.{step.version}"', fingerprint=fingerprint
        ),
    }
    assert (reject["text"]["text"], reject["url"]) == ("Reject", f"http://127.0.0.1:8000/steps/{step.pk}/")
    assert "value" not in reject  # Reject decides nothing: it opens the step page
    assert (page["text"]["text"], page["url"]) == ("Open the step page", reject["url"]) and "value" not in page
    assert similar["url"] == f"{reject['url']}#grant-when" and "value" not in similar  # the grant form (§11)


def test_the_slack_receiver_refuses_what_slack_refuses(slack: SlackReceiver) -> None:
    """The local receiver is a fair stand-in: a body Slack would refuse fails the send."""
    import httpx

    bad = {"text": "x", "blocks": [{"type": "banner", "text": {"type": "plain_text", "text": "x"}}]}
    assert httpx.post(slack.url(), json=bad).status_code == 400
    assert httpx.post(slack.url(), json={"blocks": []}).text == "no_text"
    assert httpx.post(slack.url(), json={"text": "ok"}).status_code == 200
    assert slack.refused == ["invalid_blocks", "no_text"]


def test_a_slack_receiver_that_trickles_its_answer_is_cut_at_the_deadline(
    team: Team, agent: AgentClient, trickling_receiver: TricklingReceiver
) -> None:
    """A byte every 0.3 s never trips a read timeout; the try's wall-clock deadline ends it."""
    channel = channel_create(
        team=team, kind="slack", target=trickling_receiver.url("/services/T0/B0/secretpath")
    ).channel
    hold(agent)
    channels_flush()
    [claimed] = messages_claim()
    started = time.monotonic()
    result = message_send(claimed, timeout=1.5)
    assert time.monotonic() - started < 10  # the receiver would go on for a minute
    assert not result.ok and result.status_code is None
    assert result.error.startswith("timeout: no answer within 1.5 s"), result.error
    try_record(claimed, result)
    channel.refresh_from_db()
    assert channel.last_error.startswith("timeout") and "secretpath" not in channel.last_error
    assert Message.objects.get().status == Message.Status.PENDING  # retried on the §5 schedule
