"""Sending the notification outbox: claim -> commit -> send -> record, like webhooks.delivery.

A message is claimed under SKIP LOCKED with a lease (a worker that dies leaves it due again),
sent with no transaction open, and its try recorded: success -> sent; a 410 -> the channel is
disabled (its target is gone); anything else -> retried on the §5 schedule
(`outbound.retry.retry_delay`), then dead. Each message is its own: a receiver that is down
delays only its own channel's messages. A message whose steps were all decided before it went
out is dropped, not sent. Email goes through Django's email backend (EMAIL_URL); Slack (its Block
Kit built with slack_sdk's models) and webhook channels go through outbound.http, the try every
outbound POST takes: to an address vetted by outbound.ssrf, within a hard wall-clock deadline
(slack_sdk's WebhookClient, on urllib, bounds each read but not the try), signed for webhooks.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import EmailMultiAlternatives, get_connection
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from envelopes.tracing import step_traces
from outbound import http, ssrf
from outbound.http import SEND_TIMEOUT
from outbound.retry import retry_delay
from telemetry import spans

from .models import Channel, Message, Notice, SendTry
from .services import channel_disable, notice_is_live

logger = logging.getLogger(__name__)

LEASE = timedelta(minutes=5)
CLAIM_BATCH = 10
SWEEP_BUDGET_SECONDS = 10.0
ANSWER_BYTES = 200
USER_AGENT = "Holdpoint-Notifications/1"


@dataclass(frozen=True)
class Claimed:
    pk: int
    message_id: str
    kind: str  # the channel's kind
    target: str
    secret: str
    subject: str
    text: str
    html: str
    body: str
    recipients: tuple[str, ...]
    number: int


@dataclass(frozen=True)
class Result:
    tried_at: datetime
    ok: bool
    status_code: int | None = None
    error: str = ""
    retry_after: float | None = None


def _claim(message: Message) -> Claimed:
    channel = message.channel
    return Claimed(
        pk=message.pk,
        message_id=message.message_id,
        kind=channel.kind,
        target=channel.target,
        secret=channel.secret,
        subject=message.subject,
        text=message.text,
        html=message.html,
        body=message.body,
        recipients=tuple(message.recipients),
        number=message.tries,
    )


def _all_decided(message: Message) -> bool:
    """True when the message announces steps only, and every one left the entry it announces."""
    notices = list(message.notices.select_related("step"))
    if not notices or message.kind in ("test", "tool.halted"):
        return False
    return all(notice.step_id is not None for notice in notices) and not any(
        notice_is_live(notice) for notice in notices
    )


def messages_claim(*, now: datetime | None = None, limit: int = CLAIM_BATCH) -> list[Claimed]:
    now = now or timezone.now()
    claimed: list[Claimed] = []
    with transaction.atomic():
        due = list(
            Message.objects.filter(status=Message.Status.PENDING, next_try_at__lte=now)
            .select_related("channel")
            .select_for_update(skip_locked=True, of=("self",))
            .order_by("next_try_at", "id")[:limit]
        )
        for message in due:
            if message.channel.disabled or _all_decided(message):
                message.status = Message.Status.DROPPED
                message.save(update_fields=["status"])
                continue
            message.tries += 1
            message.next_try_at = now + LEASE
            message.save(update_fields=["tries", "next_try_at"])
            claimed.append(_claim(message))
    return claimed


def claim_one(message: Message, *, now: datetime | None = None) -> Claimed | None:
    """Claim this message now (an admin's test), if it is still pending."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = (
            Message.objects.select_related("channel")
            .select_for_update(of=("self",))
            .filter(pk=message.pk, status=Message.Status.PENDING)
            .first()
        )
        if locked is None:
            return None
        locked.tries += 1
        locked.next_try_at = now + LEASE
        locked.save(update_fields=["tries", "next_try_at"])
        return _claim(locked)


# --- sending -------------------------------------------------------------------------------------


def _hide(text: str, claimed: Claimed) -> str:
    """An error in words safe to show: never the target URL (a Slack URL is a credential)
    nor the secret."""
    for value in (claimed.target, claimed.secret):
        if value and claimed.kind != Channel.Kind.EMAIL:
            text = text.replace(value, "[hidden]")
    with contextlib.suppress(Exception):
        path = ssrf.url_parse(claimed.target).path if claimed.kind != Channel.Kind.EMAIL else ""
        if path and path != "/":
            text = text.replace(path, "[hidden]")
    return text[:300]


def _send_email(claimed: Claimed, *, timeout: float) -> Result:
    tried_at = timezone.now()
    if not claimed.recipients:
        return Result(
            tried_at=tried_at, ok=False, error="no recipient: no reviewer or admin of the team has an email address"
        )
    connection = get_connection(fail_silently=False, timeout=timeout)
    mail = EmailMultiAlternatives(
        subject=claimed.subject,
        body=claimed.text,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=list(claimed.recipients),
        connection=connection,
        headers={"Message-ID": f"<{claimed.message_id}@holdpoint>", "Auto-Submitted": "auto-generated"},
    )
    mail.attach_alternative(claimed.html, "text/html")
    try:
        mail.send()
    except Exception as error:  # the backend's faults are the result (smtplib, OSError, ...)
        return Result(tried_at=tried_at, ok=False, error=_hide(f"{type(error).__name__}: {error}", claimed))
    return Result(tried_at=tried_at, ok=True)


def json_post(url: str, body: bytes, *, timeout: float, user_agent: str = USER_AGENT) -> http.Posted:
    """POST JSON to `url` as every outbound try goes (outbound.http.post: a vetted address, no
    redirects or proxies, a hard wall-clock deadline), reading at most ANSWER_BYTES of the
    answer. Never raises for the receiver's faults. The error may hold the URL: callers hide it."""
    headers = {"Content-Type": "application/json; charset=utf-8", "User-Agent": user_agent}
    return http.post(url, body, headers=headers, timeout=timeout, answer_bytes=ANSWER_BYTES)


def _send_slack(claimed: Claimed, *, timeout: float) -> Result:
    """Slack's incoming webhook: 200 "ok", or a 4xx with its reason in a word."""
    tried_at = timezone.now()
    posted = json_post(claimed.target, claimed.body.encode("utf-8"), timeout=timeout)
    if posted.status_code is None:
        return Result(tried_at=tried_at, ok=False, error=_hide(posted.error, claimed))
    ok = posted.status_code == 200
    problem = "" if ok else _hide(f"HTTP {posted.status_code}: {posted.body[:100]}", claimed)
    return Result(tried_at=tried_at, ok=ok, status_code=posted.status_code, error=problem)


def _send_webhook(claimed: Claimed, *, timeout: float) -> Result:
    result = http.signed_post(
        url=claimed.target, secret=claimed.secret, message_id=claimed.message_id, body=claimed.body, timeout=timeout
    )
    return Result(
        tried_at=result.tried_at,
        ok=result.delivered,
        status_code=result.status_code,
        error=result.error or ("" if result.delivered else f"HTTP {result.status_code}"),
        retry_after=result.retry_after,
    )


SENDERS = {Channel.Kind.EMAIL: _send_email, Channel.Kind.SLACK: _send_slack, Channel.Kind.WEBHOOK: _send_webhook}


def message_send(claimed: Claimed, *, timeout: float = SEND_TIMEOUT) -> Result:
    """One try. Never raises for the receiver's faults: they are the result."""
    attributes: spans.Attributes = {
        "holdpoint.notification.kind": claimed.kind,
        "holdpoint.notification.try": claimed.number,
    }
    span_name = "holdpoint.notification.send"
    with spans.worker_span(span_name, traces=lambda: _traces(claimed), attributes=attributes) as span:
        try:
            result = SENDERS[Channel.Kind(claimed.kind)](claimed, timeout=timeout)
        except Exception as error:  # a bug must not strand the message in its lease
            logger.exception("notification %s: the send failed", claimed.message_id)
            result = Result(tried_at=timezone.now(), ok=False, error=f"internal error ({type(error).__name__})")
        span.set_attribute("holdpoint.delivered", result.ok)
    return result


def _traces(claimed: Claimed) -> list[tuple[str, str]]:
    """The traces of the steps the message announces (its span links to each)."""
    return step_traces(list(Notice.objects.filter(message_id=claimed.pk).values_list("step_id", flat=True)))


# --- recording -----------------------------------------------------------------------------------


def try_record(claimed: Claimed, result: Result, *, now: datetime | None = None) -> str:
    """Append the try, move the message and the channel's last success or error."""
    now = now or timezone.now()
    with transaction.atomic():
        message = Message.objects.select_related("channel").select_for_update(of=("self",)).get(pk=claimed.pk)
        channel = message.channel
        next_try_at = None
        if message.status == Message.Status.PENDING:
            if result.ok:
                message.status = Message.Status.SENT
                message.sent_at = now
            elif result.status_code == 410:
                channel_disable(channel=channel, reason="410 Gone", now=now)
                message.status = Message.Status.DEAD
            elif message.tries == claimed.number:
                delay = retry_delay(message.tries, retry_after=result.retry_after)
                if delay is None:
                    message.status = Message.Status.DEAD
                else:
                    next_try_at = now + delay
                    message.next_try_at = next_try_at
            message.save(update_fields=["status", "sent_at", "next_try_at"])
        SendTry.objects.create(
            message=message,
            number=claimed.number,
            tried_at=result.tried_at,
            ok=result.ok,
            status_code=result.status_code,
            error=result.error,
            next_try_at=next_try_at,
        )
        if result.ok:
            Channel.objects.filter(pk=channel.pk).update(last_success_at=result.tried_at)
        else:
            Channel.objects.filter(pk=channel.pk).update(last_error=result.error[:300], last_error_at=result.tried_at)
    if message.status == Message.Status.DEAD:
        logger.warning(
            "notification %s to channel %s is dead after %s tries", message.message_id, channel.pk, message.tries
        )
    return message.status


def message_deliver_now(message: Message) -> str | None:
    """Claim, send and record this one message now (an admin's "send a test")."""
    claimed = claim_one(message)
    if claimed is None:
        return None
    return try_record(claimed, message_send(claimed))


def messages_release(claimed: list[Claimed], *, now: datetime | None = None) -> None:
    now = now or timezone.now()
    for message in claimed:
        Message.objects.filter(pk=message.pk, status=Message.Status.PENDING, tries=message.number).update(
            tries=F("tries") - 1, next_try_at=now
        )


def deliver_due_messages(*, budget_seconds: float = SWEEP_BUDGET_SECONDS, timeout: float = SEND_TIMEOUT) -> int:
    """Send due messages until none is due or the budget is spent; returns how many tries."""
    started = time.monotonic()
    tries = 0
    while time.monotonic() - started < budget_seconds:
        claimed = messages_claim()
        if not claimed:
            break
        for index, message in enumerate(claimed):
            if time.monotonic() - started >= budget_seconds:
                messages_release(claimed[index:])
                return tries
            try_record(message, message_send(message, timeout=timeout))
            tries += 1
    return tries
