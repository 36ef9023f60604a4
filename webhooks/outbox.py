"""Writing events to the outbox, inside the caller's transaction."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.utils import timezone

from .models import OutboxMessage, WebhookEndpoint

logger = logging.getLogger(__name__)


def event_emit(
    *,
    team_id: int,
    event_type: str,
    data: dict[str, Any] | Callable[[], dict[str, Any]],
    step_id: int | None = None,
) -> int:
    """Queue one message per active endpoint of the team; returns how many were queued.

    `data` may be a callable, so that building the body costs nothing for a team without
    endpoints. Once the caller's transaction commits, a delivery task is enqueued to cut the
    wait; the beat sweep delivers the messages anyway if that enqueue is lost."""
    endpoint_ids = list(WebhookEndpoint.objects.filter(team_id=team_id, active=True).values_list("id", flat=True))
    if not endpoint_ids:
        return 0
    if callable(data):
        data = data()
    now = timezone.now()
    body = json.dumps(
        {"type": event_type, "timestamp": now.isoformat().replace("+00:00", "Z"), "data": data},
        cls=DjangoJSONEncoder,
        separators=(",", ":"),
    )
    OutboxMessage.objects.bulk_create(
        OutboxMessage(
            team_id=team_id,
            endpoint_id=endpoint_id,
            step_id=step_id,
            message_id="msg_" + uuid.uuid4().hex,
            event_type=event_type,
            body=body,
            next_try_at=now,
        )
        for endpoint_id in endpoint_ids
    )
    transaction.on_commit(enqueue_delivery)
    return len(endpoint_ids)


def enqueue_delivery() -> None:
    """Ask a worker to deliver due messages now. Never raises: a broker outage must not
    break the request that emitted the event (the outbox row is already committed)."""
    try:
        from .tasks import deliver_due_messages

        deliver_due_messages.apply_async(retry=False)
    except Exception:
        logger.warning("could not enqueue webhook delivery; the sweep will send it", exc_info=True)
