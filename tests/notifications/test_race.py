"""The same step decided at once by the three doors (issue 13, point 5): the reviewer API, the
dashboard's form and Slack's Approve, in real threads on PostgreSQL, with a real Celery worker
on the notifications queue sending Slack's message update to a local response_url receiver.
Exactly one transition and one audit link each round; the API's loser is 412 step_changed, the
form's "Already decided", Slack's (to the clicker alone) "Already decided by ..."."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.core.cache import cache

from accounts.models import Team
from envelopes.audit import audit_verify
from envelopes.models import AuditEvent, Decision, Step
from notifications.models import SlackLink
from notifications.services import channel_create
from notifications.tasks import notify
from tests.conftest import AgentClient, logged_in
from tests.envelopes.test_concurrency import run_together
from tests.notifications.conftest import SlackReceiver, hold_proposing
from tests.notifications.test_slack_actions import SECRET, WORKSPACE, approve_value, post, press
from tests.reviewers.conftest import ReviewerClient, token_for
from tests.webhooks.conftest import Receiver
from tests.worker import Worker, wait_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.worker,
    pytest.mark.usefixtures("allow_private", "no_enqueue"),
]

ROUNDS = 4


@pytest.fixture(autouse=True)
def _empty_queues_and_caches(settings: Any) -> None:
    from config.celery import app

    settings.SLACK_SIGNING_SECRET = SECRET
    app.control.purge()
    cache.clear()  # throttle counts and remembered Slack signatures of earlier tests


def test_api_form_and_slack_at_once_make_one_transition_and_one_audit_link(
    team: Team, agent: AgentClient, slack: SlackReceiver, receiver: Receiver, make_reviewer: Any
) -> None:
    rita = token_for(make_reviewer("rita", "reviewer"))
    tess = make_reviewer("tess", "reviewer")
    sam = make_reviewer("sam", "reviewer")
    SlackLink.objects.create(user=sam, slack_team_id=WORKSPACE, slack_user_id="U0SAM")
    channel_create(team=team, kind="slack", target=slack.url(), batch_window_s=0)  # a message per step
    winners: list[str] = []
    with Worker(queues="notifications", beat=False, env={"HOLDPOINT_WEBHOOK_ALLOW_PRIVATE": "true"}):
        for n in range(ROUNDS):
            ref = f"race/{n}"
            step = hold_proposing(agent, ref)
            notify()
            value = approve_value(slack)  # the ETag this round's Slack message was built with
            assert json.loads(value)["operation_ref"] == ref
            etag = rita.etag(ref)
            form_data = {
                "action": "reject",
                "reason": "form says no",
                "expected_state": step.state,
                "expected_since": step.state_entered_at.isoformat(),
            }

            def by_api(ref: str = ref, etag: str = etag) -> Any:
                response = ReviewerClient(rita.raw_token).decide(ref, {"action": "approve"}, etag=etag)
                return response.status_code, response.json()["code"] if response.status_code >= 400 else "ok"

            def by_form(step: Step = step, data: dict[str, str] = form_data) -> Any:
                response = logged_in(tess).post(f"/steps/{step.pk}/decide", data)
                return response.status_code, [str(m) for m in get_messages(response.wsgi_request)]

            def by_slack(value: str = value, n: int = n) -> Any:
                return post(press(value, "U0SAM", receiver.url(f"/actions/{n}"))).status_code

            api, form, slack_status = run_together([by_api, by_form, by_slack])

            assert not any(isinstance(o, Exception) for o in (api, form, slack_status)), (api, form, slack_status)
            assert slack_status == 200
            (decision,) = Decision.objects.filter(step=step)
            won = {"rita": "api", "tess": "form", "sam": "slack"}[decision.reviewer.get_username()]
            winners.append(won)
            assert api == ((201, "ok") if won == "api" else (412, "step_changed")), api
            assert form[0] == 303
            assert form[1][0].startswith("Rejected" if won == "form" else "Already decided"), form
            assert AuditEvent.objects.filter(step=step, kind="decision").count() == 1
            assert AuditEvent.objects.filter(step=step, kind="transition", before="awaiting_approval").count() == 1

            # Slack's message, updated by the worker through response_url.
            assert wait_until(lambda n=n: any(r.path == f"/actions/{n}" for r in receiver.received), timeout=30)
            (update,) = [json.loads(r.body) for r in receiver.received if r.path == f"/actions/{n}"]
            if won == "slack":
                assert update["replace_original"] is True
                assert update["text"].startswith("Approved by sam")
            else:
                # The loser's value no longer verifies (the step moved): told to sam alone.
                assert (update["response_type"], update["replace_original"]) == ("ephemeral", False)
                winner = {"api": "rita", "form": "tess"}[won]
                assert update["text"].startswith(f"Already decided by {winner}"), update["text"]
    assert audit_verify() == []
    assert len(winners) == ROUNDS
