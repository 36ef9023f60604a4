"""Slack's Approve decides (contract §10): payloads posted exactly as Slack documents them
(`application/x-www-form-urlencoded`, `payload=<json>`, signed `v0` HMAC-SHA256 over
`v0:{X-Slack-Request-Timestamp}:{body}`, computed here with hmac, independently of slack_sdk),
the Approve value taken from the message the Slack channel really received, and the message
updated through a local HTTP receiver standing in for Slack's `response_url`."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client

from accounts.models import Team
from envelopes.models import AuditEvent, Decision, Step
from notifications.models import SlackLink
from notifications.services import channel_create
from notifications.tasks import notify, slack_response_send
from tests.conftest import AgentClient, logged_in
from tests.notifications.conftest import SlackReceiver, hold_proposing, slack_refusal
from tests.webhooks.conftest import Receiver

pytestmark = pytest.mark.usefixtures("allow_private", "no_enqueue", "replies_inline")

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
WORKSPACE = "T0HOLDPT"
URL = "/integrations/slack/actions"


@pytest.fixture(autouse=True)
def signing_secret(settings: Any) -> None:
    settings.SLACK_SIGNING_SECRET = SECRET


@pytest.fixture
def replies_inline(monkeypatch: pytest.MonkeyPatch) -> list[list[Any]]:
    """The response_url task runs here, as a worker runs it (tests/notifications/test_race.py
    uses a real worker), instead of reaching a broker."""
    sent: list[list[Any]] = []

    def apply_async(args: list[Any], **_: Any) -> None:
        sent.append(args)
        slack_response_send.apply(args=args).get()

    monkeypatch.setattr(slack_response_send, "apply_async", apply_async)
    return sent


def sign(body: str, timestamp: int, secret: str = SECRET) -> str:
    base = f"v0:{timestamp}:{body}".encode()
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def post(
    payload: dict[str, Any], *, timestamp: int | None = None, secret: str = SECRET, signature: str | None = None
) -> Any:
    body = urlencode({"payload": json.dumps(payload)})
    timestamp = int(time.time()) if timestamp is None else timestamp
    return Client().generic(
        "POST",
        URL,
        body,
        content_type="application/x-www-form-urlencoded",
        HTTP_X_SLACK_REQUEST_TIMESTAMP=str(timestamp),
        HTTP_X_SLACK_SIGNATURE=signature or sign(body, timestamp, secret),
    )


def approve_value(slack: SlackReceiver, index: int = -1) -> str:
    """The Approve button's value in the message the Slack channel received."""
    blocks = slack.payloads()[index]["blocks"]
    (actions,) = [block for block in blocks if block["type"] == "actions"]
    return str(actions["elements"][0]["value"])


def press(value: str, member: str, response_url: str, action_id: str = "holdpoint.approve") -> dict[str, Any]:
    """A block_actions payload as Slack sends it for a button in a message."""
    action: dict[str, Any] = {
        "action_id": action_id,
        "block_id": "holdpoint-step-1",
        "text": {"type": "plain_text", "text": "Approve", "emoji": False},
        "type": "button",
        "action_ts": f"{time.time():.6f}",
    }
    if action_id == "holdpoint.approve":
        action |= {"value": value, "style": "primary"}
    else:
        action |= {"url": "http://127.0.0.1:8000/steps/1/"}
    return {
        "type": "block_actions",
        "user": {"id": member, "username": member.lower(), "name": member.lower(), "team_id": WORKSPACE},
        "api_app_id": "A0HOLDPT",
        "token": "verification-token-deprecated",
        "container": {"type": "message", "message_ts": "1700000000.000100", "channel_id": "C0REVIEW"},
        "trigger_id": "1.2.abc",
        "team": {"id": WORKSPACE, "domain": "acme"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": "C0REVIEW", "name": "reviews"},
        "message": {"type": "message", "text": "Holdpoint acme: Approval requested", "ts": "1700000000.000100"},
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [action],
    }


@pytest.fixture
def held(team: Team, agent: AgentClient, slack: SlackReceiver) -> Step:
    channel_create(team=team, kind="slack", target=slack.url("/services/T0HOLDPT/B0/secret"))
    step = hold_proposing(agent, "run_5/refund")
    notify()
    slack.check()
    return step


def link(user: Any, member: str) -> SlackLink:
    return SlackLink.objects.create(user=user, slack_team_id=WORKSPACE, slack_user_id=member)


def replies(receiver: Receiver) -> list[dict[str, Any]]:
    """What reached the response_url, each a body Slack accepts (text, known block types)."""
    assert all(slack_refusal(request.body) is None for request in receiver.received)
    return [json.loads(request.body) for request in receiver.received]


def test_approve_decides_as_the_linked_user_and_updates_the_message(
    team: Team, held: Step, slack: SlackReceiver, receiver: Receiver, make_reviewer: Any
) -> None:
    rita = make_reviewer("rita", "reviewer")
    link(rita, "U0RITA")
    response = post(press(approve_value(slack), "U0RITA", receiver.url("/actions/T0/1/xyz")))

    assert response.status_code == 200
    held.refresh_from_db()
    assert held.state != "awaiting_approval"
    (decision,) = Decision.objects.filter(step=held)
    assert (decision.reviewer, decision.action) == (rita, "approve")
    assert AuditEvent.objects.filter(step=held, kind=AuditEvent.Kind.DECISION, actor="rita").count() == 1
    (reply,) = replies(receiver)
    assert receiver.received[0].path == "/actions/T0/1/xyz"
    assert receiver.received[0].headers["content-type"].startswith("application/json")
    assert reply["replace_original"] is True
    assert reply["text"].startswith("Approved by rita: charge_card run_5/refund")
    assert "actions" not in {block["type"] for block in reply["blocks"]}  # no button left to press


def test_a_press_on_a_message_whose_step_moved_is_already_decided(
    team: Team, held: Step, slack: SlackReceiver, receiver: Receiver, make_reviewer: Any
) -> None:
    link(make_reviewer("rita", "reviewer"), "U0RITA")
    link(make_reviewer("sam", "reviewer"), "U0SAM")
    value = approve_value(slack)
    assert post(press(value, "U0RITA", receiver.url("/r/1"))).status_code == 200
    assert post(press(value, "U0SAM", receiver.url("/r/2"))).status_code == 200

    assert Decision.objects.filter(step=held).count() == 1
    second = replies(receiver)[1]
    # To sam alone: the step moved, so the value no longer verifies and may not rewrite the
    # message for everyone (rita's own press already did).
    assert (second["response_type"], second["replace_original"]) == ("ephemeral", False)
    assert second["text"].startswith("Already decided by rita (approve): charge_card run_5/refund is now")
    assert second["text"].endswith("This message is out of date: open the step page.")


def test_with_two_approvals_required_the_first_press_says_so(
    team: Team, agent: AgentClient, slack: SlackReceiver, receiver: Receiver, make_reviewer: Any
) -> None:
    from django.core.management import call_command

    call_command("configuretool", "acme", "charge_card", "required_approvals=2")
    channel_create(team=team, kind="slack", target=slack.url())
    step = hold_proposing(agent, "run_6/refund")
    notify()
    link(make_reviewer("rita", "reviewer"), "U0RITA")
    assert post(press(approve_value(slack), "U0RITA", receiver.url())).status_code == 200

    step.refresh_from_db()
    assert step.state == "awaiting_approval"
    first = replies(receiver)[0]
    assert first["text"].startswith("Approved by rita (1 of 2 approvals)")

    # The updated message carries a fresh Approve (the step's new ETag) for the second reviewer.
    link(make_reviewer("sam", "reviewer"), "U0SAM")
    (actions,) = [block for block in first["blocks"] if block["type"] == "actions"]
    fresh = actions["elements"][0]["value"]
    assert json.loads(fresh)["etag"] == f'"{step.pk}.{step.version}"'
    assert post(press(fresh, "U0SAM", receiver.url())).status_code == 200
    step.refresh_from_db()
    assert step.state != "awaiting_approval"
    assert replies(receiver)[1]["text"].startswith("Approved by sam: charge_card run_6/refund")


def test_a_press_on_a_message_whose_step_changed_but_is_still_held_says_so(
    team: Team, agent: AgentClient, slack: SlackReceiver, receiver: Receiver, make_reviewer: Any
) -> None:
    """Two approvals required: rita's first (on the dashboard) changes the step, so sam's press
    on the older message decides nothing, and the message says where to decide now."""
    from django.core.management import call_command

    from approvals.services import step_decide

    call_command("configuretool", "acme", "charge_card", "required_approvals=2")
    channel_create(team=team, kind="slack", target=slack.url())
    step = hold_proposing(agent, "run_8/refund")
    notify()
    step_decide(team=team, step_id=step.pk, actor=make_reviewer("rita", "reviewer"), action="approve")
    link(make_reviewer("sam", "reviewer"), "U0SAM")
    assert post(press(approve_value(slack), "U0SAM", receiver.url())).status_code == 200

    assert list(Decision.objects.values_list("reviewer__username", flat=True)) == ["rita"]
    (reply,) = replies(receiver)
    assert (reply["response_type"], reply["replace_original"]) == ("ephemeral", False)
    assert reply["text"].startswith("Not decided: charge_card run_8/refund changed since this message was sent")


def test_an_unlinked_member_is_told_where_to_link_and_nothing_is_decided_until_they_do(
    team: Team, held: Step, slack: SlackReceiver, receiver: Receiver, make_reviewer: Any
) -> None:
    value = approve_value(slack)
    assert post(press(value, "U0NEW", receiver.url("/r/1"))).status_code == 200
    assert not Decision.objects.exists()
    (reply,) = replies(receiver)
    assert reply["response_type"] == "ephemeral" and reply["replace_original"] is False
    assert "not linked" in reply["text"]
    [context] = [block for block in reply["blocks"] if block["type"] == "context"]
    link_url = context["elements"][0]["text"].split("|")[0].lstrip("<").replace("&amp;", "&")
    assert link_url.startswith("http://127.0.0.1:8000/account/?slack=")

    rita = make_reviewer("rita", "reviewer")
    browser = logged_in(rita)
    page = browser.get(link_url.removeprefix("http://127.0.0.1:8000"))
    assert page.status_code == 200
    assert f"Link Slack member U0NEW of workspace {WORKSPACE} to rita?" in page.content.decode()
    token = link_url.split("slack=", 1)[1]
    from urllib.parse import unquote

    assert browser.post("/account/slack/link", {"slack": unquote(token)}).status_code == 302
    assert SlackLink.objects.get().user == rita

    assert post(press(value, "U0NEW", receiver.url("/r/2"))).status_code == 200
    assert Decision.objects.get().reviewer == rita


def test_a_viewer_is_refused_and_nothing_is_decided(
    team: Team, held: Step, slack: SlackReceiver, receiver: Receiver, make_reviewer: Any
) -> None:
    link(make_reviewer("vic", "viewer"), "U0VIC")
    assert post(press(approve_value(slack), "U0VIC", receiver.url())).status_code == 200
    assert not Decision.objects.exists()
    held.refresh_from_db()
    assert held.state == "awaiting_approval"
    (reply,) = replies(receiver)
    assert reply["response_type"] == "ephemeral"
    assert reply["text"].startswith("Not decided: Your role in acme is viewer")


def test_a_member_of_another_team_decides_nothing(
    team: Team, other_team: Team, held: Step, slack: SlackReceiver, receiver: Receiver, make_reviewer: Any
) -> None:
    link(make_reviewer("olga", "admin", in_team=other_team), "U0OLGA")
    assert post(press(approve_value(slack), "U0OLGA", receiver.url())).status_code == 200
    assert not Decision.objects.exists()
    assert "nothing was decided" in replies(receiver)[0]["text"]


def test_forged_stale_and_replayed_requests_are_refused_and_decide_nothing(
    team: Team,
    held: Step,
    slack: SlackReceiver,
    receiver: Receiver,
    make_reviewer: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    link(make_reviewer("rita", "reviewer"), "U0RITA")
    payload = press(approve_value(slack), "U0RITA", receiver.url("/r/secret-response-path"))
    caplog.set_level(logging.DEBUG)

    forged = post(payload, secret="not-the-signing-secret")
    stale = post(payload, timestamp=int(time.time()) - 301)  # signed right, but 5 min 1 s old
    future = post(payload, timestamp=int(time.time()) + 310)  # ahead by more than 5 min, whatever a slow run takes
    unsigned = Client().post(URL, {"payload": json.dumps(payload)})
    tampered_body = urlencode({"payload": json.dumps(payload)})
    good_signature = sign(tampered_body, int(time.time()))
    payload["user"]["id"] = "U0OTHER"
    tampered = post(payload, signature=good_signature)
    assert [r.status_code for r in (forged, stale, future, unsigned, tampered)] == [401] * 5
    assert not Decision.objects.exists() and receiver.received == []

    # The same signed request twice: the first decides, the replay is refused.
    payload["user"]["id"] = "U0RITA"
    body = urlencode({"payload": json.dumps(payload)})
    timestamp = int(time.time())
    headers = {"HTTP_X_SLACK_REQUEST_TIMESTAMP": str(timestamp), "HTTP_X_SLACK_SIGNATURE": sign(body, timestamp)}
    kind = "application/x-www-form-urlencoded"
    assert Client().generic("POST", URL, body, content_type=kind, **headers).status_code == 200
    assert Client().generic("POST", URL, body, content_type=kind, **headers).status_code == 401
    assert Decision.objects.count() == 1

    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "refused" in logged
    assert "v0=" not in logged and SECRET not in logged and "secret-response-path" not in logged
    assert good_signature not in logged and headers["HTTP_X_SLACK_SIGNATURE"] not in logged


def test_without_a_signing_secret_the_endpoint_does_not_exist(held: Step, settings: Any) -> None:
    settings.SLACK_SIGNING_SECRET = ""
    assert post(press('{"team":"acme"}', "U0RITA", "http://127.0.0.1:9/")).status_code == 404


def test_reject_opens_the_step_page_and_its_click_decides_nothing(
    held: Step, slack: SlackReceiver, receiver: Receiver, make_reviewer: Any
) -> None:
    link(make_reviewer("rita", "reviewer"), "U0RITA")
    response = post(press("", "U0RITA", receiver.url(), action_id="holdpoint.reject"))
    assert response.status_code == 200
    assert not Decision.objects.exists() and receiver.received == []


@pytest.mark.parametrize(
    "change",
    [
        {"type": "block_actions", "actions": []},
        {"actions": [{"action_id": "holdpoint.approve", "value": "not json", "type": "button"}]},
        {"actions": [{"action_id": "holdpoint.approve", "value": '{"team":"acme"}', "type": "button"}]},
        {"user": {"id": "not-a-member-id", "team_id": WORKSPACE}},
        {"response_url": None},
    ],
)
def test_a_signed_but_malformed_payload_is_a_400(
    held: Step, slack: SlackReceiver, receiver: Receiver, make_reviewer: Any, change: dict[str, Any]
) -> None:
    link(make_reviewer("rita", "reviewer"), "U0RITA")
    payload = press(approve_value(slack), "U0RITA", receiver.url()) | change
    assert post(payload).status_code == 400
    assert not Decision.objects.exists()


def test_a_response_url_outside_slack_is_not_used(
    held: Step, slack: SlackReceiver, receiver: Receiver, make_reviewer: Any, settings: Any
) -> None:
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = False
    link(make_reviewer("rita", "reviewer"), "U0RITA")
    assert post(press(approve_value(slack), "U0RITA", receiver.url())).status_code == 200
    assert Decision.objects.count() == 1  # Slack signed it: the decision stands
    assert receiver.received == []  # but Holdpoint posts only to Slack's own https host


def test_the_message_update_is_retried_when_slack_answers_5xx(
    held: Step, slack: SlackReceiver, receiver: Receiver, make_reviewer: Any
) -> None:
    from tests.webhooks.conftest import Answer

    link(make_reviewer("rita", "reviewer"), "U0RITA")
    receiver.answer(Answer(503))
    assert post(press(approve_value(slack), "U0RITA", receiver.url())).status_code == 200
    first, second = replies(receiver)  # the task's retry (run at once here) sent it again
    assert first == second and first["text"].startswith("Approved by rita")


def test_only_slacks_own_https_hosts_take_message_updates(settings: Any) -> None:
    from notifications.slack import response_url_allowed

    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = False
    assert response_url_allowed("https://hooks.slack.com/actions/T0/1/abc")
    assert not response_url_allowed("http://hooks.slack.com/actions/T0/1/abc")
    assert not response_url_allowed("https://hooks.slack.com.evil.example/actions/T0/1/abc")
    assert not response_url_allowed("https://user:pw@hooks.slack.com/actions/T0/1/abc")
