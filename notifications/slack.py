"""Slack's buttons decide (contract §10): `POST /integrations/slack/actions`.

Slack posts an interaction payload (`application/x-www-form-urlencoded`, `payload=<json>`)
signed with the app's signing secret. It is checked with slack_sdk's SignatureVerifier against
SLACK_SIGNING_SECRET (v0 HMAC-SHA256 over `v0:{timestamp}:{body}`, the timestamp within 5
minutes, a constant-time comparison) before anything in it is read; anything else is 401 and
nothing is decided. Without SLACK_SIGNING_SECRET the endpoint does not exist (404).

`Approve` is offered only by a message that shows the step's whole proposal, sent and not
redacted (content.slack_proposal). Its value carries `{team, operation_ref, etag, fp, mac}`:
the step's ETag when the message was built, the first 12 hex digits of the proposal's
fingerprint (the message shows them too) and Holdpoint's MAC over team, ref, ETag and the full
fingerprint (slack_buttons). On the locked step, the MAC must verify with the step's current
ETag and proposal, else nothing is decided and the clicker alone is told the message is out of
date (a value that does not verify may not rewrite a message for everyone). The Slack member
is the Holdpoint user linked to them (SlackLink); that user decides through
reviewers.services.decide_with_etag, the one decision path of the reviewer API and the
dashboard, with that user's roles. The message is then updated through Slack's `response_url`
by a task on the notifications queue (Slack wants its 200 within 3 s): "approved by X", and
after the first of two approvals the whole proposal again with a fresh Approve. Refusals (out
of date, not linked, a viewer, not a member) go to the clicker alone (ephemeral), and decide
nothing.

`Reject` is a URL button (a reason is needed: it opens the step page), as is the `Open the step
page` that replaces both when Approve is not offered; their clicks post here too and are
answered 200 with nothing done. Nothing here logs the signature, a token or the
response_url.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core import signing
from django.core.cache import cache
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from slack_sdk.models.blocks import ContextBlock, MarkdownTextObject, PlainTextObject, SectionBlock
from slack_sdk.signature import SignatureVerifier

from approvals.services import DecisionResult
from envelopes.errors import StepNotFound
from envelopes.models import Step
from envelopes.presenters import step_representation
from envelopes.services import step_lock_for_decision
from outbound import ssrf
from reviewers import errors, services
from reviewers.services import step_etag

from .content import base_url, proposal_facts, slack_escape, slack_proposal, step_decision_blocks
from .models import SLACK_TEAM_ID_RE, SLACK_USER_ID_RE, SlackLink
from .slack_buttons import ApproveValue, fingerprint_shown, value_fields

logger = logging.getLogger(__name__)

APPROVE = "holdpoint.approve"
REJECT = "holdpoint.reject"
MAX_BODY = 64 * 1024
LINK_SALT = "holdpoint.slack-link"
LINK_MAX_AGE = 3600  # a link to /account/ from an ephemeral reply is good for an hour
REPLAY_SECONDS = 6 * 60  # above the verifier's 5-minute window
RESPONSE_URL_HOSTS = ("hooks.slack.com", "hooks.slack-gov.com")


class PayloadInvalid(ValueError):
    """A signed payload that is not one Holdpoint's buttons make."""


@dataclass(frozen=True)
class Press:
    """A button pressed: who (in Slack), which, and what its value carries."""

    slack_team_id: str
    slack_user_id: str
    action_id: str
    response_url: str
    team: str = ""
    operation_ref: str = ""
    etag: str = ""
    fingerprint_shown: str = ""  # "" when the value had none (an older message) or a malformed one
    mac: str = ""


# --- checking what Slack sent ----------------------------------------------------------------------


def signature_valid(request: HttpRequest, secret: str) -> bool:
    """slack_sdk's check (timestamp within 5 minutes, constant-time HMAC comparison), and a
    request seen once already is refused: its signature is remembered past the window."""
    verifier = SignatureVerifier(signing_secret=secret)
    timestamp = request.headers.get("X-Slack-Request-Timestamp", "")
    signature = request.headers.get("X-Slack-Signature", "")
    if not timestamp.isdigit() or not verifier.is_valid(request.body, timestamp, signature):
        return False
    try:
        return bool(cache.add(f"holdpoint:slack:seen:{signature}", 1, timeout=REPLAY_SECONDS))
    except Exception:
        logger.warning("the cache is unavailable; Slack replays within 5 minutes are not refused", exc_info=True)
        return True


def _text(value: object, field: str, *, limit: int = 300, pattern: str | None = None) -> str:
    if not isinstance(value, str) or not value or len(value) > limit or not value.isprintable():
        raise PayloadInvalid(f"{field} is missing or not text")
    if pattern is not None and not re.match(pattern, value):
        raise PayloadInvalid(f"{field} has an unexpected form")
    return value


def press_parse(body: dict[str, Any]) -> Press | None:
    """The Holdpoint button a block_actions payload reports, or None for anything else (Slack
    sends other interactions to the same URL). Raises PayloadInvalid for a malformed one."""
    if body.get("type") != "block_actions":
        return None
    actions = body.get("actions")
    if not isinstance(actions, list) or len(actions) != 1 or not isinstance(actions[0], dict):
        raise PayloadInvalid("actions is not one action")
    action = actions[0]
    action_id = action.get("action_id")
    if action_id not in (APPROVE, REJECT):
        return None
    user = body.get("user") if isinstance(body.get("user"), dict) else {}
    team = body.get("team") if isinstance(body.get("team"), dict) else {}
    assert isinstance(user, dict) and isinstance(team, dict)
    press = Press(
        # The member's own workspace (it differs from the channel's in shared channels).
        slack_team_id=_text(user.get("team_id") or team.get("id"), "user.team_id", limit=32, pattern=SLACK_TEAM_ID_RE),
        slack_user_id=_text(user.get("id"), "user.id", limit=32, pattern=SLACK_USER_ID_RE),
        action_id=str(action_id),
        response_url=_text(body.get("response_url"), "response_url", limit=2000),
    )
    if action_id == REJECT:
        return press
    try:
        value = json.loads(_text(action.get("value"), "actions[0].value", limit=2000))
    except ValueError as error:
        raise PayloadInvalid("actions[0].value is not JSON") from error
    if not isinstance(value, dict):
        raise PayloadInvalid("actions[0].value is not an object")
    fingerprint, mac = value_fields(value.get("fp"), value.get("mac"))
    return Press(
        slack_team_id=press.slack_team_id,
        slack_user_id=press.slack_user_id,
        action_id=press.action_id,
        response_url=press.response_url,
        team=_text(value.get("team"), "value.team", limit=100),
        operation_ref=_text(value.get("operation_ref"), "value.operation_ref", limit=200),
        etag=_text(value.get("etag"), "value.etag", limit=100, pattern=r'\A"\d+\.\d+"\Z'),
        fingerprint_shown=fingerprint,
        mac=mac,
    )


def press_value(press: Press) -> ApproveValue:
    return ApproveValue(
        team=press.team,
        operation_ref=press.operation_ref,
        etag=press.etag,
        fingerprint_shown=press.fingerprint_shown,
        mac=press.mac,
    )


def response_url_allowed(url: str) -> bool:
    """Slack's own https host; any http(s) host where webhooks may go to private addresses
    (development and tests). json_post vets the address besides."""
    try:
        parsed = ssrf.url_parse(url)
    except ssrf.UnsafeTarget:
        return False
    if ssrf.private_targets_allowed():
        return True
    return parsed.scheme == "https" and parsed.host in RESPONSE_URL_HOSTS


# --- linking a Slack member --------------------------------------------------------------------


def link_token(press: Press) -> str:
    return signing.dumps({"t": press.slack_team_id, "u": press.slack_user_id}, salt=LINK_SALT, compress=True)


def link_token_read(token: str) -> tuple[str, str] | None:
    """The (workspace, member) a link token names, if Holdpoint signed it within the hour."""
    try:
        data = signing.loads(token, salt=LINK_SALT, max_age=LINK_MAX_AGE)
    except signing.BadSignature:
        return None
    if not isinstance(data, dict):
        return None
    team, user = data.get("t"), data.get("u")
    if not isinstance(team, str) or not isinstance(user, str):
        return None
    if not re.match(SLACK_TEAM_ID_RE, team) or not re.match(SLACK_USER_ID_RE, user):
        return None
    return team, user


def link_url(press: Press) -> str:
    from urllib.parse import urlencode

    return f"{base_url()}/account/?{urlencode({'slack': link_token(press)})}"


# --- what goes back to Slack -------------------------------------------------------------------


def _reply(
    text: str, *, replace: bool, link: str = "", link_text: str = "", step: list[Any] | None = None
) -> dict[str, Any]:
    """A response_url body: `replace_original` (for everyone) or an ephemeral note to the
    clicker. Agent text only ever in plain_text; links are Holdpoint's own; `step`: the blocks
    of `step_decision_blocks` (the proposal shown whole, and its buttons)."""
    blocks: list[Any] = [SectionBlock(text=PlainTextObject(text=slack_escape(text)[:2900], emoji=False))]
    if link:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=f"<{slack_escape(link)}|{link_text}>")]))
    blocks.extend(step or [])
    body: dict[str, Any] = {"text": slack_escape(text)[:2900], "blocks": [block.to_dict() for block in blocks]}
    if replace:
        body["replace_original"] = True
    else:
        body["response_type"] = "ephemeral"
        body["replace_original"] = False
    return body


def reply_enqueue(press: Press, body: dict[str, Any]) -> None:
    """Send `body` to the press's response_url from a worker, after this request answers."""
    from .tasks import slack_response_send

    if not response_url_allowed(press.response_url):
        logger.warning("Slack action: a response_url outside Slack's hosts was not used")
        return
    try:
        # argsrepr: what the worker's logs and events show of the args, instead of the URL.
        slack_response_send.apply_async(
            args=[press.response_url, body], argsrepr="('<response_url>', <message>)", retry=False
        )
    except Exception:
        logger.warning("Slack action: could not enqueue the message update", exc_info=False)


class MessageOutOfDate(Exception):
    """The pressed Approve is not one Holdpoint made for the step as it is now."""

    def __init__(self, step: Step) -> None:
        super().__init__("out of date")
        self.step = step


def approve_as_shown(*, user: Any, press: Press) -> DecisionResult:
    """Approve as `user` exactly the input the pressed message showed, or nothing.

    On the locked step: the value must be Holdpoint's MAC for this team, ref, the step's current
    ETag and the full fingerprint of its current proposal, and that proposal must still be one a
    message shows whole (sent, not redacted); else MessageOutOfDate and nothing is written. The
    decision is then the one decision service's (roles, four-eyes, audit link); if it bound
    another input than the one shown, it is rolled back. Raises what decide_with_etag raises."""
    team = services.team_membership(user=user, team_slug=press.team).team
    step = services.step_of_team(team, press.operation_ref)
    with transaction.atomic():
        locked = step_lock_for_decision(team=team, step_id=step.pk)
        shown = slack_proposal(proposal_facts(step_representation(locked)), awaiting=True)
        etag = step_etag(locked)
        made = press_value(press).made_for(
            team=team.slug, operation_ref=locked.operation_ref, etag=etag, fingerprint=shown.fingerprint
        )
        if not (shown.approvable and made):
            raise MessageOutOfDate(locked)
        result = services.decide_with_etag(
            user=user, team_slug=team.slug, operation_ref=locked.operation_ref, action="approve", etag=etag
        )
        if result.decision.input_fingerprint != shown.fingerprint:
            raise MessageOutOfDate(locked)
    return result


def press_handle(press: Press) -> None:
    """Decide (Approve) as the linked user, and say so through the response_url."""
    link = (
        SlackLink.objects.select_related("user")
        .filter(slack_team_id=press.slack_team_id, slack_user_id=press.slack_user_id)
        .first()
    )
    if link is None or not link.user.is_active:
        logger.info("Slack action: an unlinked Slack member pressed %s; nothing decided", press.action_id)
        reply_enqueue(
            press,
            _reply(
                "Your Slack account is not linked to a Holdpoint user, so nothing was decided. "
                "Link it (signed in to Holdpoint), then press Approve again.",
                replace=False,
                link=link_url(press),
                link_text="Link your account",
            ),
        )
        return
    user = link.user
    name = user.get_username()
    try:
        result = approve_as_shown(user=user, press=press)
    except (MessageOutOfDate, errors.StepChanged) as stale:
        step = (
            stale.step
            if isinstance(stale, MessageOutOfDate)
            else services.step_of_team(
                services.team_membership(user=user, team_slug=press.team).team, press.operation_ref
            )
        )
        logger.info("Slack action: %s pressed an Approve out of date for step %s; nothing decided", name, step.pk)
        # To the clicker alone: a value that does not verify may not rewrite a message for everyone.
        reply_enqueue(
            press,
            _reply(
                _out_of_date(step, press),
                replace=False,
                link=f"{base_url()}/steps/{step.pk}/",
                link_text="Open the step page",
            ),
        )
        return
    except (errors.TeamNotFound, StepNotFound):
        reply_enqueue(
            press, _reply(f"{name} is not a member of a team with this step; nothing was decided.", replace=False)
        )
        return
    except (
        errors.RoleRequired,
        errors.DecisionNotAllowed,
        errors.DecisionInvalid,
        errors.PreconditionRequired,
    ) as refused:
        reply_enqueue(press, _reply(f"Not decided: {refused}", replace=False))
        return
    step = result.step
    step_url = f"{base_url()}/steps/{step.pk}/"
    required = step.approvals_required
    shown = fingerprint_shown(result.decision.input_fingerprint)
    more: list[Any] = []
    if result.transitioned or result.approvals_so_far >= required:
        text = f"Approved by {name}: {step.tool.name} {step.operation_ref} (input {shown})."
    else:
        text = (
            f"Approved by {name} ({result.approvals_so_far} of {required} approvals): {step.tool.name} "
            f"{step.operation_ref} (input {shown}) still waits for another reviewer."
        )
        # The next reviewer sees the whole proposal again, and its Approve is signed for the
        # step as it is now (its new ETag).
        more = step_decision_blocks(
            team=press.team,
            step_id=step.pk,
            state=step.state,
            operation_ref=step.operation_ref,
            etag=step_etag(step),
            url=step_url,
            proposal=proposal_facts(step_representation(step)),
        )
    logger.info("Slack action: %s approved step %s", name, step.pk)
    reply_enqueue(press, _reply(text, replace=True, link=step_url, link_text="Open the step page", step=more))


def _out_of_date(step: Step, press: Press) -> str:
    what = f"{step.tool.name} {step.operation_ref}"
    if press.etag == step_etag(step):
        return (
            f"Not decided: this message is out of date, or its Approve was not made by Holdpoint for {what} "
            "as it is now; open the step page to decide on it."
        )
    return f"{_already_decided(step)} This message is out of date: open the step page."


def _already_decided(step: Any) -> str:
    """What a stale Approve tells everyone in the channel: who decided, or, while the step is
    still held (another reviewer's first of two approvals, a new envelope), that it changed."""
    from envelopes.models import Decision

    what = f"{step.tool.name} {step.operation_ref}"
    if step.held:
        return (
            f"Not decided: {what} changed since this message was sent ({step.reason}); "
            "decide on the step page, where it is shown as it is now."
        )
    decision = (
        Decision.objects.filter(step=step, decided_at__gte=step.state_entered_at - timedelta(seconds=1))
        .select_related("reviewer")
        .order_by("-decided_at", "-id")
        .first()
    )
    state = step.state.replace("_", " ")
    if decision is not None:
        return f"Already decided by {decision.decider} ({decision.action}): {what} is now {state}."
    return f"Not decided: {what} is now {state} ({step.reason})."


# --- the endpoint ------------------------------------------------------------------------------


@csrf_exempt  # Slack signs it; there is no session
@require_POST
def slack_actions(request: HttpRequest) -> HttpResponse:
    secret = str(settings.SLACK_SIGNING_SECRET)
    if not secret:
        raise Http404("Slack actions are not configured (SLACK_SIGNING_SECRET).")
    if len(request.body) > MAX_BODY:
        return HttpResponse("too large", status=413, content_type="text/plain")
    if not signature_valid(request, secret):
        logger.warning("Slack action refused: bad, stale or replayed signature; nothing decided")
        return HttpResponse("invalid signature", status=401, content_type="text/plain")
    try:
        body = json.loads(request.POST.get("payload", ""))
        press = press_parse(body) if isinstance(body, dict) else None
    except (ValueError, PayloadInvalid) as error:
        logger.warning("Slack action refused: %s", error if isinstance(error, PayloadInvalid) else "payload not JSON")
        return HttpResponse("invalid payload", status=400, content_type="text/plain")
    if press is not None and press.action_id == APPROVE:
        press_handle(press)
    return HttpResponse(status=200)
