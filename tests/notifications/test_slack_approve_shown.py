"""Slack's Approve approves only what the message shows (issue 23, point 3; contract §10).

Messages are the ones the Slack channel really received (a local receiver that answers as Slack
does); presses go through `/integrations/slack/actions` signed as Slack signs them (see
test_slack_actions.py). A message offers Approve only with the whole proposal shown, sent and
unredacted, and its value carries the fingerprint's prefix and a MAC Holdpoint checks, with an
oracle computed here independently (conftest.expected_mac)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.utils import timezone

from accounts.models import Team
from approvals.services import step_decide
from envelopes.models import AuditEvent, Decision, Step
from envelopes.proposal import input_fingerprint
from notifications.content import SLACK_PROPOSAL_CHARS, content_build, proposal_facts, render_slack, slack_proposal
from notifications.models import Notice
from notifications.services import channel_create
from notifications.tasks import notify
from tests.conftest import AgentClient
from tests.notifications.conftest import SlackReceiver, expected_mac, hold, hold_proposing
from tests.notifications.test_slack_actions import (  # noqa: F401 (fixtures: the signing secret, inline replies)
    link,
    post,
    press,
    replies,
    replies_inline,
    signing_secret,
)
from tests.webhooks.conftest import Receiver

pytestmark = pytest.mark.usefixtures("allow_private", "no_enqueue", "replies_inline")

# Harmless text that sorts before "payee", long enough that no Slack message shows it whole.
LONG = {"a_note": "Refund for order 1042, customer asked politely. " * 70, "amount": 12, "payee": "acct_mallory"}
SHORT = {"amount": 1250, "currency": "EUR", "customer": "cus_9", "payee": "acct_shop_1"}


@pytest.fixture
def channel(team: Team, slack: SlackReceiver) -> None:
    channel_create(team=team, kind="slack", target=slack.url("/services/T0HOLDPT/B0/secret"), batch_window_s=0)


def message_for(slack: SlackReceiver, ref: str) -> dict[str, Any]:
    """The last message the channel received about `ref`."""
    slack.check()
    found = [payload for payload in slack.payloads() if ref in json.dumps(payload)]
    assert found, ref
    return found[-1]


def buttons(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [element for block in message["blocks"] if block["type"] == "actions" for element in block["elements"]]


def proposal_text(message: dict[str, Any]) -> str:
    (text,) = [
        block["text"]["text"]
        for block in message["blocks"]
        if block["type"] == "section" and block["text"]["text"].startswith("proposal")
    ]
    return str(text)


def approve_of(message: dict[str, Any]) -> str:
    (approve,) = [button for button in buttons(message) if button["action_id"] == "holdpoint.approve"]
    return str(approve["value"])


def assert_step_page_only(message: dict[str, Any], step: Step) -> None:
    """No Approve: one link button to the step page, which decides nothing by itself."""
    (only,) = buttons(message)
    assert (only["text"]["text"], only["url"]) == ("Open the step page", f"http://127.0.0.1:8000/steps/{step.pk}/")
    assert "value" not in only


def nothing_decided(step: Step) -> None:
    step.refresh_from_db()
    assert step.state == "awaiting_approval"
    assert not Decision.objects.filter(step=step).exists()
    assert not AuditEvent.objects.filter(step=step, kind=AuditEvent.Kind.DECISION).exists()


# --- what the message offers -------------------------------------------------------------------


def test_a_short_clean_proposal_is_shown_whole_with_approve_and_its_fingerprint_prefix(
    team: Team, agent: AgentClient, slack: SlackReceiver, channel: None
) -> None:
    step = hold_proposing(agent, "run_1/refund", SHORT)
    notify()

    message = message_for(slack, "run_1/refund")
    fingerprint = input_fingerprint(SHORT)
    text = proposal_text(message)
    assert f"fingerprint {fingerprint[:12]}" in text and fingerprint not in text
    assert json.loads(text.split(":\n", 1)[1]) == SHORT  # the whole input, as JSON
    value = json.loads(approve_of(message))
    etag = f'"{step.pk}.{step.version}"'
    assert value == {
        "team": "acme",
        "operation_ref": "run_1/refund",
        "etag": etag,
        "fp": fingerprint[:12],
        "mac": expected_mac(team="acme", operation_ref="run_1/refund", etag=etag, fingerprint=fingerprint),
    }
    assert [button["text"]["text"] for button in buttons(message)] == [
        "Approve",
        "Reject",
        "Approve and allow similar…",
        "Open the step page",
    ]
    similar = buttons(message)[2]
    # A link to the step page's grant form (§11: its condition is read in words before saving).
    assert similar["url"] == f"http://127.0.0.1:8000/steps/{step.pk}/#grant-when" and "value" not in similar


def test_a_tool_needing_two_approvals_offers_no_grant_in_slack(
    team: Team, agent: AgentClient, slack: SlackReceiver, channel: None
) -> None:
    from django.core.management import call_command

    call_command("configuretool", "acme", "charge_card", "required_approvals=2")
    hold_proposing(agent, "run_1/refund", SHORT)
    notify()

    message = message_for(slack, "run_1/refund")
    assert [button["text"]["text"] for button in buttons(message)] == ["Approve", "Reject", "Open the step page"]


def test_a_payee_after_300_characters_is_now_shown_before_approve(
    team: Team, agent: AgentClient, slack: SlackReceiver, channel: None
) -> None:
    """The old message cut at 300 characters; one that still fits whole is shown whole."""
    sneaky = {"a_note": "Refund for order 1042, customer asked politely. " * 8, "payee": "acct_mallory"}
    assert len(json.dumps(sneaky)) > 300
    hold_proposing(agent, "run_2/refund", sneaky)
    notify()

    message = message_for(slack, "run_2/refund")
    assert "acct_mallory" in proposal_text(message)
    assert approve_of(message)


def test_a_proposal_too_long_to_show_whole_has_no_approve_but_a_link_to_the_step_page(
    team: Team, agent: AgentClient, slack: SlackReceiver, channel: None
) -> None:
    step = hold_proposing(agent, "run_3/refund", LONG)
    notify()

    message = message_for(slack, "run_3/refund")
    text = proposal_text(message)
    assert "cut:" in text and "the step page shows it all and decides on it" in text
    assert "acct_mallory" not in json.dumps(message)  # cut before the payee: so no Approve
    assert_step_page_only(message, step)
    assert all(len(block["text"]["text"]) <= 3000 for block in message["blocks"] if block["type"] == "section")


def test_the_largest_proposal_shown_whole_fits_a_slack_section(
    team: Team, agent: AgentClient, slack: SlackReceiver, channel: None
) -> None:
    """At the bound, the section (heading and input) stays within Slack's 3000 characters and
    nothing is clipped; one character more and it is cut, without Approve. Escaping counts."""
    padding = SLACK_PROPOSAL_CHARS - len(json.dumps({"a": "", "payee": "acct_1"}, separators=(",", ":")))
    at_bound = {"a": "x" * padding, "payee": "acct_1"}
    over = {"a": "x" * (padding - 3) + "<", "payee": "acct_1"}  # "<" is "&lt;" to Slack: 3 more
    hold_proposing(agent, "run_4/at", at_bound)
    notify()
    hold_proposing(agent, "run_4/over", over)
    notify()

    fits, cut = message_for(slack, "run_4/at"), message_for(slack, "run_4/over")
    text = proposal_text(fits)
    assert len(text) <= 3000 and text.endswith('"payee":"acct_1"}')
    assert approve_of(fits)
    assert "cut:" in proposal_text(cut)
    assert "holdpoint.approve" not in json.dumps(cut)


def test_a_redacted_proposal_has_no_approve(
    team: Team, agent: AgentClient, slack: SlackReceiver, channel: None
) -> None:
    step = hold_proposing(agent, "run_5/refund", {**SHORT, "api_token": "tok_plain_value_1"})
    notify()

    message = message_for(slack, "run_5/refund")
    text = proposal_text(message)
    assert "redacted: part of it is hidden; decide on the step page" in text
    assert "[REDACTED:" in text and "tok_plain_value_1" not in json.dumps(message)
    assert_step_page_only(message, step)


def test_an_absent_proposal_has_no_approve(team: Team, agent: AgentClient, slack: SlackReceiver, channel: None) -> None:
    step = hold(agent, "run_6/refund")  # no attempt: the agent sent no input
    notify()

    message = message_for(slack, "run_6/refund")
    assert proposal_text(message) == "proposal: the agent sent no input; decide on the step page"
    assert_step_page_only(message, step)


def test_a_redaction_marker_in_the_input_counts_as_redacted() -> None:
    def shown(value: dict[str, Any]) -> bool:
        step = {"proposal": {"input": value, "input_fingerprint": "a" * 64, "input_redacted": False}}
        return slack_proposal(proposal_facts(step), awaiting=True).approvable

    assert not shown({"payee": "[REDACTED:key_name]"})
    assert not shown({"items": [{"note": "pay [REDACTED:stripe_key] now"}]})
    assert not shown({"[REDACTED:key_name]": "x"})
    assert shown({"payee": "acct_1", "note": "REDACTED"})


def test_characters_that_print_as_nothing_are_shown_escaped(
    team: Team, agent: AgentClient, slack: SlackReceiver, channel: None
) -> None:
    """A right-to-left override or a zero-width space could make one payee read as another."""
    tricky = {"payee": "acct_\u202etoob\u200b_1", "note": "tab\there"}
    hold_proposing(agent, "run_7/refund", tricky)
    notify()

    raw = next(r.body.decode() for r in slack.received if "run_7/refund" in r.body.decode())
    text = proposal_text(message_for(slack, "run_7/refund"))
    assert "\u202e" not in raw and "\u200b" not in raw
    assert r"acct_\u202etoob\u200b_1" in text and r"tab\there" in text
    assert json.loads(text.split(":\n", 1)[1]) == tricky  # still the same JSON value
    assert approve_of(message_for(slack, "run_7/refund"))


def test_invisible_characters_beyond_the_basic_plane_round_trip_as_json_escapes() -> None:
    from notifications.content import visible_json

    value = {"payee": "acct\U000e0041\u2028\u00a0_1", "emoji": "\U0001f4b8", "\u200dkey": [1, "two"]}
    for indent in (2, None):
        text = visible_json(value, indent=indent)
        assert text.isascii() is False  # the printable emoji is kept as it is
        assert all(char.isprintable() or char == "\n" for char in text)
        assert json.loads(text) == value
    assert "\\udb40\\udc41" in visible_json(value, indent=None)


def test_a_digest_never_shows_buttons_without_their_proposal(team: Team, agent: AgentClient, channel: None) -> None:
    """Slack takes 50 blocks: steps that do not fit whole go to "and N more"."""
    for n in range(12):
        hold_proposing(agent, f"run_8/{n}", {**SHORT, "n": n})
    body = render_slack(content_build(team="acme", notices=list(Notice.objects.order_by("id")), now=timezone.now()))

    blocks = body["blocks"]
    assert len(blocks) <= 50
    shown = [i for i, block in enumerate(blocks) if block["type"] == "actions"]
    assert shown and all(blocks[i - 1]["text"]["text"].startswith("proposal") for i in shown)
    more = [b["text"]["text"] for b in blocks if b["type"] == "section" and b["text"]["text"].startswith("and ")]
    # Each step's blocks (with Approve and allow similar) take about 1,600 of the 12,000 characters.
    assert 7 <= len(shown) <= 10 and more == [f"and {12 - len(shown)} more"]


def test_a_digest_of_long_proposals_stays_within_what_slack_takes_in_all(
    team: Team, agent: AgentClient, channel: None
) -> None:
    """Slack refuses blocks too long in all (msg_blocks_too_long) below its documented limits:
    whole proposals that would pass SLACK_MAX_BLOCKS_JSON go to "and N more", not cut."""
    for n in range(10):
        hold_proposing(agent, f"run_13/{n}", {**SHORT, "note": f"{n} " + "checked twice. " * 160})
    body = render_slack(content_build(team="acme", notices=list(Notice.objects.order_by("id")), now=timezone.now()))

    blocks = body["blocks"]
    assert sum(len(json.dumps(block, separators=(",", ":"), ensure_ascii=False)) for block in blocks) <= 12_000
    proposals = [
        b["text"]["text"] for b in blocks if b["type"] == "section" and b["text"]["text"].startswith("proposal")
    ]
    approves = [
        e for b in blocks if b["type"] == "actions" for e in b["elements"] if e["action_id"] == "holdpoint.approve"
    ]
    assert 1 <= len(proposals) < 10 and len(approves) == len(proposals)
    assert all("shown whole" in text for text in proposals)
    more = [b["text"]["text"] for b in blocks if b["type"] == "section" and b["text"]["text"].startswith("and ")]
    assert more == [f"and {10 - len(proposals)} more"]


# --- pressing ----------------------------------------------------------------------------------


def test_open_the_step_page_is_a_link_whose_click_decides_nothing(
    team: Team, agent: AgentClient, slack: SlackReceiver, channel: None, receiver: Receiver, make_reviewer: Any
) -> None:
    link(make_reviewer("rita", "reviewer"), "U0RITA")
    step = hold(agent, "run_14/refund")
    notify()
    assert_step_page_only(message_for(slack, "run_14/refund"), step)
    assert post(press("", "U0RITA", receiver.url(), action_id="holdpoint.open")).status_code == 200
    nothing_decided(step)
    assert receiver.received == []


@pytest.fixture
def shown(team: Team, agent: AgentClient, slack: SlackReceiver, channel: None, make_reviewer: Any) -> Step:
    """A clean proposal's message, and rita linked to her Slack member."""
    link(make_reviewer("rita", "reviewer"), "U0RITA")
    step = hold_proposing(agent, "run_9/refund", SHORT)
    notify()
    return step


def test_a_valid_press_approves_exactly_the_fingerprint_shown(
    shown: Step, slack: SlackReceiver, receiver: Receiver
) -> None:
    message = message_for(slack, "run_9/refund")
    prefix = json.loads(approve_of(message))["fp"]
    assert post(press(approve_of(message), "U0RITA", receiver.url())).status_code == 200

    (decision,) = Decision.objects.filter(step=shown)
    assert (decision.reviewer.get_username(), decision.action) == ("rita", "approve")
    assert decision.input_fingerprint == input_fingerprint(SHORT) and decision.input_fingerprint.startswith(prefix)
    assert AuditEvent.objects.filter(step=shown, kind=AuditEvent.Kind.DECISION, actor="rita").count() == 1
    (reply,) = replies(receiver)
    assert reply["replace_original"] is True
    assert reply["text"] == f"Approved by rita: charge_card run_9/refund (input {prefix})."


def _forgeries(value: dict[str, Any], other: dict[str, Any], step: Step) -> dict[str, dict[str, Any]]:
    flipped = value["mac"][:-1] + ("0" if value["mac"][-1] != "0" else "1")
    return {
        "no MAC": {k: v for k, v in value.items() if k != "mac"},
        "no fingerprint": {k: v for k, v in value.items() if k != "fp"},
        "a MAC altered": value | {"mac": flipped},
        "another fingerprint": value | {"fp": "0" * 12},
        "a later ETag": value | {"etag": f'"{step.pk}.{step.version + 1}"'},
        "another message's MAC": value | {"mac": other["mac"]},
        "this MAC on another step": other | {"mac": value["mac"]},
        "this MAC on another ref": value | {"operation_ref": other["operation_ref"]},
    }


def test_a_forged_or_altered_value_decides_nothing(
    team: Team, agent: AgentClient, shown: Step, slack: SlackReceiver, receiver: Receiver
) -> None:
    value = json.loads(approve_of(message_for(slack, "run_9/refund")))
    other_step = hold_proposing(agent, "run_9/other", {**SHORT, "amount": 99})
    notify()
    other = json.loads(approve_of(message_for(slack, "run_9/other")))

    forgeries = _forgeries(value, other, shown)
    for name, forged in forgeries.items():
        assert post(press(json.dumps(forged), "U0RITA", receiver.url(f"/r/{len(receiver.received)}"))).status_code == (
            200
        ), name
        nothing_decided(shown)
        nothing_decided(other_step)
        reply = replies(receiver)[-1]
        assert (reply["response_type"], reply["replace_original"]) == ("ephemeral", False), name
        assert reply["text"].startswith("Not decided") and "out of date" in reply["text"], (name, reply["text"])
        assert "Open the step page" in json.dumps(reply["blocks"])
    assert len(receiver.received) == len(forgeries)

    # The genuine values still work: refusing the forgeries changed nothing.
    assert post(press(json.dumps(other), "U0RITA", receiver.url())).status_code == 200
    assert Decision.objects.get().step == other_step


def test_a_value_for_another_teams_step_decides_nothing(
    team: Team,
    other_team: Team,
    other_agent: AgentClient,
    shown: Step,
    slack: SlackReceiver,
    receiver: Receiver,
    make_reviewer: Any,
) -> None:
    """rita reviews for both teams; acme's MAC does not decide globex's step of the same ref."""
    make_reviewer("rita", "reviewer", in_team=other_team)
    hold_proposing(other_agent, "run_9/refund", SHORT)  # the same ref, the same input
    theirs = Step.objects.get(team=other_team, operation_ref="run_9/refund")
    value = json.loads(approve_of(message_for(slack, "run_9/refund")))
    forged = value | {"team": "globex", "etag": f'"{theirs.pk}.{theirs.version}"'}

    assert post(press(json.dumps(forged), "U0RITA", receiver.url())).status_code == 200
    assert not Decision.objects.exists()
    nothing_decided(theirs)
    (reply,) = replies(receiver)
    assert reply["response_type"] == "ephemeral" and reply["text"].startswith(
        "Not decided: this message is out of date"
    )


def test_a_press_after_the_agent_proposed_another_input_decides_nothing(
    team: Team, agent: AgentClient, shown: Step, slack: SlackReceiver, receiver: Receiver, make_reviewer: Any
) -> None:
    """sam approves on the dashboard; the agent then asks to run another input, so the step
    waits for approval again, with a new ETag and fingerprint: the first message's Approve,
    pressed now, would approve an input nobody showed rita."""
    old = approve_of(message_for(slack, "run_9/refund"))
    step_decide(team=team, step_id=shown.pk, actor=make_reviewer("sam", "reviewer"), action="approve")
    other_input = {**SHORT, "payee": "acct_mallory"}
    answer = agent.attempt(
        "run_9/refund", tool="charge_card", fingerprint=input_fingerprint(other_input), input=other_input
    )
    assert answer.status_code == 409 and answer.json()["code"] == "approval_mismatch", answer.content
    shown.refresh_from_db()
    assert shown.state == "awaiting_approval"

    assert post(press(old, "U0RITA", receiver.url())).status_code == 200
    assert list(Decision.objects.values_list("reviewer__username", flat=True)) == ["sam"]
    (reply,) = replies(receiver)
    assert reply["response_type"] == "ephemeral"
    assert reply["text"].endswith("This message is out of date: open the step page.")

    # The step's new message shows the new input whole, and its Approve approves that one.
    notify()
    fresh = message_for(slack, "run_9/refund")
    assert "acct_mallory" in proposal_text(fresh)
    assert post(press(approve_of(fresh), "U0RITA", receiver.url())).status_code == 200
    assert Decision.objects.get(reviewer__username="rita").input_fingerprint == input_fingerprint(other_input)


def test_a_replayed_value_on_a_step_that_moved_in_place_decides_nothing(
    team: Team, agent: AgentClient, shown: Step, slack: SlackReceiver, receiver: Receiver
) -> None:
    """A new envelope for the held step (the same input) moves its ETag: the old value is out
    of date even though its fingerprint is still the proposal's."""
    value = approve_of(message_for(slack, "run_9/refund"))
    before = shown.version
    hold(agent, "run_9/refund", safe_details={"limit": "900", "field": "amount"})
    shown.refresh_from_db()
    assert shown.version != before and shown.state == "awaiting_approval"

    assert post(press(value, "U0RITA", receiver.url())).status_code == 200
    nothing_decided(shown)
    (reply,) = replies(receiver)
    assert reply["response_type"] == "ephemeral" and "out of date" in reply["text"]


def test_a_key_rotation_keeps_posted_buttons_working_through_the_fallbacks(
    shown: Step, slack: SlackReceiver, receiver: Receiver, settings: Any
) -> None:
    value = approve_of(message_for(slack, "run_9/refund"))
    old_key = settings.SECRET_KEY
    settings.SECRET_KEY = "a-new-secret-key-for-this-test-" + "x" * 40
    settings.SECRET_KEY_FALLBACKS = []
    assert post(press(value, "U0RITA", receiver.url("/r/1"))).status_code == 200
    nothing_decided(shown)  # made with a key Holdpoint no longer has

    settings.SECRET_KEY_FALLBACKS = [old_key]
    assert post(press(value, "U0RITA", receiver.url("/r/2"))).status_code == 200
    assert Decision.objects.get().step == shown


def test_with_two_approvals_the_updated_message_shows_the_proposal_with_a_fresh_signed_approve(
    team: Team, agent: AgentClient, slack: SlackReceiver, channel: None, receiver: Receiver, make_reviewer: Any
) -> None:
    from django.core.management import call_command

    call_command("configuretool", "acme", "charge_card", "required_approvals=2")
    link(make_reviewer("rita", "reviewer"), "U0RITA")
    link(make_reviewer("sam", "reviewer"), "U0SAM")
    step = hold_proposing(agent, "run_10/refund", SHORT)
    notify()
    first = approve_of(message_for(slack, "run_10/refund"))
    assert post(press(first, "U0RITA", receiver.url())).status_code == 200

    (update,) = replies(receiver)
    step.refresh_from_db()
    fingerprint = input_fingerprint(SHORT)
    assert update["text"].startswith(
        f"Approved by rita (1 of 2 approvals): charge_card run_10/refund (input {fingerprint[:12]})"
    )
    assert "acct_shop_1" in proposal_text(update) and f"fingerprint {fingerprint[:12]}" in proposal_text(update)
    etag = f'"{step.pk}.{step.version}"'
    fresh = json.loads(approve_of(update))
    assert fresh["etag"] == etag
    assert fresh["mac"] == expected_mac(team="acme", operation_ref="run_10/refund", etag=etag, fingerprint=fingerprint)

    assert post(press(first, "U0SAM", receiver.url())).status_code == 200  # the first message's: stale
    assert Decision.objects.count() == 1
    assert post(press(json.dumps(fresh), "U0SAM", receiver.url())).status_code == 200
    assert set(Decision.objects.values_list("input_fingerprint", flat=True)) == {fingerprint}
    step.refresh_from_db()
    assert step.state != "awaiting_approval"


def test_a_reviewers_edit_under_review_is_shown_as_such_and_approve_binds_it(
    team: Team, agent: AgentClient, slack: SlackReceiver, channel: None, receiver: Receiver, make_reviewer: Any
) -> None:
    """sam edits the payee and approves on the dashboard; before running it the agent asks for
    approval again, so the edit is under review: the first message is out of date, the new one
    shows the edit whole, says it is one, and its Approve approves the edit."""
    link(make_reviewer("rita", "reviewer"), "U0RITA")
    step = hold_proposing(agent, "run_11/refund", SHORT)
    notify()
    old = approve_of(message_for(slack, "run_11/refund"))
    edited = {**SHORT, "payee": "acct_checked_by_sam"}
    step_decide(
        team=team, step_id=step.pk, actor=make_reviewer("sam", "reviewer"), action="approve", edited_input=edited
    )
    hold(agent, "run_11/refund")
    step.refresh_from_db()
    assert step.state == "awaiting_approval"
    assert post(press(old, "U0RITA", receiver.url())).status_code == 200
    assert Decision.objects.count() == 1

    notify()
    text = proposal_text(fresh := message_for(slack, "run_11/refund"))
    assert text.startswith(
        f"proposal (a reviewer's edit of the agent's input, fingerprint {input_fingerprint(edited)[:12]})"
    )
    assert "acct_checked_by_sam" in text
    assert post(press(approve_of(fresh), "U0RITA", receiver.url())).status_code == 200
    assert Decision.objects.get(reviewer__username="rita").input_fingerprint == input_fingerprint(edited)


def test_with_two_approvals_an_edit_leaves_the_agents_input_under_review_and_shown(
    team: Team, agent: AgentClient, slack: SlackReceiver, channel: None, receiver: Receiver, make_reviewer: Any
) -> None:
    """Two approvals: sam's edit (1 of 2) starts its own count and the binding stays the agent's
    input; a message built now shows that input, and its Approve approves that one, not sam's."""
    from django.core.management import call_command

    call_command("configuretool", "acme", "charge_card", "required_approvals=2")
    link(make_reviewer("rita", "reviewer"), "U0RITA")
    step = hold_proposing(agent, "run_12/refund", SHORT)
    step_decide(
        team=team,
        step_id=step.pk,
        actor=make_reviewer("sam", "reviewer"),
        action="approve",
        edited_input={**SHORT, "payee": "acct_checked_by_sam"},
    )
    body = render_slack(content_build(team="acme", notices=list(Notice.objects.filter(step=step)), now=timezone.now()))
    assert "acct_shop_1" in proposal_text(body) and "acct_checked_by_sam" not in json.dumps(body)
    assert post(press(approve_of(body), "U0RITA", receiver.url())).status_code == 200
    assert Decision.objects.get(reviewer__username="rita").input_fingerprint == input_fingerprint(SHORT)
    assert replies(receiver)[0]["text"].startswith("Approved by rita (1 of 2 approvals)")


def test_a_decision_binding_another_input_than_the_one_shown_is_undone(
    team: Team, shown: Step, slack: SlackReceiver, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should the decision service ever bind another input than the proposal a message shows
    (the binding and the proposal are computed apart), the press writes nothing."""
    from notifications import content
    from notifications import slack as slack_module

    shown_elsewhere = {**SHORT, "payee": "acct_shown_but_not_bound"}
    fingerprint = input_fingerprint(shown_elsewhere)

    def facts(step: dict[str, Any]) -> content.ProposalFacts:
        return content.ProposalFacts(input=shown_elsewhere, fingerprint=fingerprint, redacted=False, edited=False)

    monkeypatch.setattr(slack_module, "proposal_facts", facts)
    etag = f'"{shown.pk}.{shown.version}"'
    value = {
        "team": "acme",
        "operation_ref": "run_9/refund",
        "etag": etag,
        "fp": fingerprint[:12],
        "mac": expected_mac(team="acme", operation_ref="run_9/refund", etag=etag, fingerprint=fingerprint),
    }
    assert post(press(json.dumps(value), "U0RITA", receiver.url())).status_code == 200
    nothing_decided(shown)
    (reply,) = replies(receiver)
    assert reply["response_type"] == "ephemeral" and "out of date" in reply["text"]
