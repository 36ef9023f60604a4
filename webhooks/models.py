"""Webhook endpoints and the outbox that carries events to them (contract §5).

The database is the queue: an OutboxMessage is written in the transaction of the change it
reports, and `webhooks.delivery` claims due messages with SKIP LOCKED. Every try is a
DeliveryTry row, never edited."""

from __future__ import annotations

from datetime import datetime

from django.db import models
from django.db.models import Q
from django.utils import timezone


class WebhookEndpointQuerySet(models.QuerySet["WebhookEndpoint"]):
    def for_team(self, team: models.Model) -> WebhookEndpointQuerySet:
        return self.filter(team=team)

    def active(self) -> WebhookEndpointQuerySet:
        return self.filter(active=True)


class WebhookEndpoint(models.Model):
    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="webhook_endpoints")
    url = models.URLField(max_length=2000)
    # The signing secret (whsec_...). It has to be kept to sign; it is shown once at creation.
    secret = models.CharField(max_length=200)
    active = models.BooleanField(default=True)
    disabled_reason = models.CharField(max_length=100, blank=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = WebhookEndpointQuerySet.as_manager()

    def __str__(self) -> str:
        return self.url


class OutboxMessageQuerySet(models.QuerySet["OutboxMessage"]):
    def for_team(self, team: models.Model) -> OutboxMessageQuerySet:
        return self.filter(team=team)

    def due(self, now: datetime) -> OutboxMessageQuerySet:
        return self.filter(status=OutboxMessage.Status.PENDING, next_try_at__lte=now)

    def dead(self) -> OutboxMessageQuerySet:
        return self.filter(status=OutboxMessage.Status.DEAD)


class OutboxMessage(models.Model):
    """One event for one endpoint, written in the transaction of the change it reports."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        DEAD = "dead"

    class DeadReason(models.TextChoices):
        TRIES_EXHAUSTED = "tries_exhausted", "No 2xx after the last try"
        ENDPOINT_GONE = "endpoint_gone", "The endpoint answered 410 Gone"
        ENDPOINT_DISABLED = "endpoint_disabled", "The endpoint was disabled"

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+", db_constraint=False)
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="messages")
    step = models.ForeignKey(
        "envelopes.Step",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="webhook_messages",
    )
    message_id = models.CharField(max_length=64, unique=True)  # webhook-id, the same on every try
    event_type = models.CharField(max_length=40)
    body = models.TextField()  # the exact JSON that is signed and sent
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    # Tries claimed so far. A claim counts even if its worker dies before recording, so a
    # message that crashes workers still ends as a dead letter.
    tries = models.PositiveIntegerField(default=0)
    # When the next try is due. While a worker holds the message it is the lease's end: a
    # message whose worker died becomes due again then.
    next_try_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)
    dead_reason = models.CharField(max_length=32, choices=DeadReason.choices, blank=True)

    objects = OutboxMessageQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["pending", "delivered", "dead"]), name="outbox_status_valid"
            ),
            models.CheckConstraint(condition=Q(status="dead") | Q(dead_reason=""), name="outbox_dead_reason_only_dead"),
        ]
        indexes = [
            # The delivery sweep: pending messages whose next try is due.
            models.Index(fields=["next_try_at"], name="outbox_due_idx", condition=Q(status="pending")),
            # Dead letters shown to the team.
            models.Index(fields=["team", "-created_at"], name="outbox_dead_idx", condition=Q(status="dead")),
            # retention.delivered_messages_purge: delivered before the cutoff, oldest first.
            models.Index(fields=["delivered_at"], name="outbox_delivered_idx", condition=Q(status="delivered")),
            # retention.dead_letters_purge: dead letters written before the cutoff, oldest first.
            models.Index(fields=["created_at"], name="outbox_dead_created_idx", condition=Q(status="dead")),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.message_id} ({self.status})"


class DeliveryTryQuerySet(models.QuerySet["DeliveryTry"]):
    def for_step(self, step: models.Model) -> DeliveryTryQuerySet:
        """The step page's webhook tries. Served by two indexes Django makes for the foreign
        keys (OutboxMessage.step, DeliveryTry.message): a nested loop over the step's few
        messages, whatever the size of either table; a step
        column on the tries would only repeat them."""
        return self.filter(message__step=step)


class DeliveryTry(models.Model):
    """One try of one message. Append-only."""

    message = models.ForeignKey(OutboxMessage, on_delete=models.CASCADE, related_name="delivery_tries")
    number = models.PositiveIntegerField()
    tried_at = models.DateTimeField(default=timezone.now)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    error = models.CharField(max_length=300, blank=True)  # never holds the secret or the URL
    # The next try this one scheduled (None: delivered, or it was the last).
    next_try_at = models.DateTimeField(null=True, blank=True)

    objects = DeliveryTryQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["message", "number"], name="deliverytry_unique")]

    def __str__(self) -> str:
        return f"try {self.number} of {self.message_id}"

    @property
    def succeeded(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300
