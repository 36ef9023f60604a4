"""Writes about webhook endpoints: registering, disabling, redelivering a dead letter."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from accounts.models import Team
from envelopes.after_response import on_commit_later
from outbound import ssrf
from outbound.signing import secret_generate

from .models import OutboxMessage, WebhookEndpoint


class WebhookError(Exception):
    """A webhook write that cannot be done; the message says why."""


@dataclass(frozen=True)
class NewEndpoint:
    endpoint: WebhookEndpoint
    secret: str  # shown once, to be given to the receiver


def endpoint_create(*, team: Team, url: str) -> NewEndpoint:
    """Register an endpoint for a team, with a new signing secret.

    Raises ssrf.UnsafeTarget for a URL webhooks may not go to (checked with DNS now, and
    again before every try)."""
    ssrf.url_check(url)
    secret = secret_generate()
    endpoint = WebhookEndpoint.objects.create(team=team, url=url.strip(), secret=secret)
    return NewEndpoint(endpoint=endpoint, secret=secret)


def endpoint_secret_rotate(*, endpoint: WebhookEndpoint) -> str:
    """A new secret for the endpoint, used from the next try on; returns it (shown once)."""
    secret = secret_generate()
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(secret=secret)
    endpoint.secret = secret
    return secret


def endpoint_disable(*, endpoint: WebhookEndpoint, reason: str, now: datetime | None = None) -> int:
    """Disable an endpoint; its pending messages become dead letters. Returns how many."""
    now = now or timezone.now()
    with transaction.atomic():
        WebhookEndpoint.objects.filter(pk=endpoint.pk).update(
            active=False, disabled_reason=reason[:100], disabled_at=now
        )
        endpoint.active, endpoint.disabled_reason, endpoint.disabled_at = False, reason[:100], now
        return OutboxMessage.objects.filter(endpoint=endpoint, status=OutboxMessage.Status.PENDING).update(
            status=OutboxMessage.Status.DEAD,
            dead_reason=OutboxMessage.DeadReason.ENDPOINT_DISABLED,
        )


def message_redeliver(*, message: OutboxMessage, now: datetime | None = None) -> OutboxMessage:
    """Give a dead letter one more try, now (same webhook-id). Its endpoint must be active."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = OutboxMessage.objects.select_related("endpoint").select_for_update(of=("self",)).get(pk=message.pk)
        if locked.status != OutboxMessage.Status.DEAD:
            raise WebhookError("Only a dead letter can be redelivered.")
        if not locked.endpoint.active:
            raise WebhookError("The endpoint is disabled; enable it (or register it again) first.")
        locked.status = OutboxMessage.Status.PENDING
        locked.dead_reason = ""
        locked.next_try_at = now
        locked.save(update_fields=["status", "dead_reason", "next_try_at"])
    on_commit_later(_enqueue_delivery_quietly)
    return locked


def _enqueue_delivery_quietly() -> None:
    from .outbox import enqueue_delivery

    enqueue_delivery()
