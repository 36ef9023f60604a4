"""Notification channels and what goes through them (contract §9).

A change of the core becomes Notices (one per channel that wants it) in the change's
transaction; a channel's pending notices are flushed into one Message at a time (at once, or a
digest at the end of the batching window); Messages are the outbox, sent by Celery and retried
on the §5 schedule, every try a SendTry row. A Watch remembers a held step announced to a
channel: the reminders, the expiry warning and the escalation it may still owe."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

EVENTS = (
    "approval.requested",
    "verification.requested",
    "step.escalated",
    "tool.halted",
    "step.overdue",
    "approval.expiring",
)
DEFAULT_EVENTS = EVENTS[:4]
ANNOUNCEMENTS = ["approval.requested", "verification.requested", "step.escalated"]  # a held state entered
MAX_REMINDERS = 3


def default_events() -> list[str]:
    return list(DEFAULT_EVENTS)


class ChannelQuerySet(models.QuerySet["Channel"]):
    def for_team(self, team: models.Model) -> ChannelQuerySet:
        return self.filter(team=team)

    def enabled(self) -> ChannelQuerySet:
        return self.filter(disabled_at__isnull=True)


class Channel(models.Model):
    class Kind(models.TextChoices):
        EMAIL = "email"
        SLACK = "slack"
        WEBHOOK = "webhook"

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="notification_channels")
    name = models.CharField(max_length=100, blank=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    # email: comma-separated addresses or "@reviewers"; slack: the incoming-webhook URL (itself a
    # credential: never shown whole); webhook: the receiver's URL.
    target = models.CharField(max_length=2000)
    events = models.JSONField(default=default_events)
    tools = models.JSONField(default=list, blank=True)  # empty: every tool
    batch_window_s = models.PositiveIntegerField(default=60)
    remind_after_s = models.PositiveIntegerField(default=3600)
    escalate_to = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    escalate_after_s = models.PositiveIntegerField(null=True, blank=True)
    # A webhook channel's signing secret (whsec_...), kept to sign as §5 does; shown once.
    secret = models.CharField(max_length=200, blank=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.CharField(max_length=100, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)  # never the target or the secret
    last_error_at = models.DateTimeField(null=True, blank=True)
    # The batching window: nothing is sent before this (a digest of what waited goes then).
    window_ends_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = ChannelQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=["email", "slack", "webhook"]), name="channel_kind_valid"),
        ]

    def __str__(self) -> str:
        return self.label

    @property
    def label(self) -> str:
        return self.name or f"{self.kind} #{self.pk}"

    @property
    def disabled(self) -> bool:
        return self.disabled_at is not None

    def wants(self, event: str, tool: str | None) -> bool:
        return event in self.events and (not self.tools or tool is None or tool in self.tools)

    def wants_tool(self, tool: str | None) -> bool:
        return not self.tools or tool is None or tool in self.tools


class Watch(models.Model):
    """A step that entered a held state, as one channel follows it. Updated, not history."""

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+", db_constraint=False)
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="watches")
    step = models.ForeignKey("envelopes.Step", on_delete=models.CASCADE, related_name="+")
    state = models.CharField(max_length=20)
    entered_at = models.DateTimeField()  # the step's state_entered_at: a later entry is another watch
    announced_at = models.DateTimeField()
    reminders = models.PositiveSmallIntegerField(default=0)
    expiring_sent = models.BooleanField(default=False)
    escalated = models.BooleanField(default=False)
    # When the next reminder, warning or escalation is due; None when it owes nothing more.
    due_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["channel", "step", "entered_at"], name="watch_unique_entry"),
        ]
        indexes = [
            # The watch sweep: watches whose next reminder, warning or escalation is due.
            models.Index(fields=["due_at"], name="watch_due_idx", condition=Q(due_at__isnull=False)),
            # retention.finished_watches_purge: watches that owe nothing, oldest first.
            models.Index(fields=["announced_at"], name="watch_finished_idx", condition=Q(due_at__isnull=True)),
        ]


class Message(models.Model):
    """One send to one channel (a single event, a digest or a test), the outbox of §9."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        DEAD = "dead"
        DROPPED = "dropped"  # every step it announced was decided before it went out

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="messages")
    message_id = models.CharField(max_length=64, unique=True)  # webhook-id, the same on every try
    kind = models.CharField(max_length=40)  # an event, "digest" or "test"
    subject = models.CharField(max_length=300)
    text = models.TextField()
    html = models.TextField(blank=True)
    body = models.TextField(blank=True)  # the JSON sent to Slack or the webhook
    recipients = models.JSONField(default=list, blank=True)  # email: resolved when it was built
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    tries = models.PositiveIntegerField(default=0)
    next_try_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["pending", "sent", "dead", "dropped"]), name="notification_message_status_valid"
            ),
        ]
        indexes = [
            # The send sweep: pending messages whose next try is due.
            models.Index(fields=["next_try_at"], name="ntf_message_due_idx", condition=Q(status="pending")),
            # A channel's recent messages on /notifications/.
            models.Index(fields=["channel", "-created_at"], name="ntf_message_channel_idx"),
            # retention.messages_purge: finished messages written before the cutoff, oldest first.
            models.Index(
                fields=["created_at"],
                name="ntf_message_finished_idx",
                condition=Q(status__in=["sent", "dead", "dropped"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.message_id} ({self.status})"


class NoticeQuerySet(models.QuerySet["Notice"]):
    def pending(self) -> NoticeQuerySet:
        return self.filter(status=Notice.Status.PENDING)


class Notice(models.Model):
    """One event for one channel, written in the transaction of the change it reports."""

    class Status(models.TextChoices):
        PENDING = "pending"  # waits for its channel's next message
        SENT = "sent"  # carried by `message`
        DROPPED = "dropped"  # the step moved on (or the channel was disabled) before it went out
        FOLDED = "folded"  # a step of a halted tool: the halt's message speaks for it

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+", db_constraint=False)
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="notices")
    event = models.CharField(max_length=40)
    step = models.ForeignKey("envelopes.Step", on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    tool = models.CharField(max_length=100, blank=True)
    entered_at = models.DateTimeField(null=True, blank=True)  # the step's held entry it is about
    escalated_from = models.ForeignKey(Channel, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    # A halt's {tool, reason, until}. A step's notice holds nothing: its message shows the step
    # as it is when the message is built (still in the entry it announces, or not sent at all).
    data = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    message = models.ForeignKey(Message, on_delete=models.SET_NULL, null=True, blank=True, related_name="notices")
    created_at = models.DateTimeField(default=timezone.now)

    objects = NoticeQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["pending", "sent", "dropped", "folded"]), name="notice_status_valid"
            ),
            # A step's entry into a held state is announced once per channel (escalations and
            # reminders are notices of their own).
            models.UniqueConstraint(
                fields=["channel", "step", "event", "entered_at"],
                condition=Q(event__in=ANNOUNCEMENTS, escalated_from__isnull=True),
                name="notice_unique_announcement",
            ),
        ]
        indexes = [
            # A channel's flush: its pending notices in order.
            models.Index(fields=["channel", "created_at"], name="notice_pending_idx", condition=Q(status="pending")),
            # The step page's "notified <channel>" entries.
            models.Index(fields=["step"], name="notice_step_idx", condition=Q(step__isnull=False)),
            # retention.dropped_notices_purge: notices dropped before any message, oldest first.
            models.Index(
                fields=["created_at"], name="notice_dropped_idx", condition=Q(status="dropped", message__isnull=True)
            ),
        ]


class SendTryQuerySet(models.QuerySet["SendTry"]):
    def for_step(self, step: models.Model | int) -> SendTryQuerySet:
        """Tries of the messages that announced this step (its timeline's "notified ...")."""
        step_id = step if isinstance(step, int) else step.pk
        return self.filter(message__in=Notice.objects.filter(step_id=step_id, message__isnull=False).values("message"))


class SendTry(models.Model):
    """One try of one message. Append-only."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="send_tries")
    number = models.PositiveIntegerField()
    tried_at = models.DateTimeField(default=timezone.now)
    ok = models.BooleanField(default=False)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=300, blank=True)  # never the target or the secret
    next_try_at = models.DateTimeField(null=True, blank=True)

    objects = SendTryQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["message", "number"], name="sendtry_unique")]

    def __str__(self) -> str:
        return f"try {self.number} of {self.message_id}"


SLACK_TEAM_ID_RE = r"\A[TE][A-Z0-9]{2,31}\Z"  # a workspace (T…) or an Enterprise Grid org (E…)
SLACK_USER_ID_RE = r"\A[UW][A-Z0-9]{2,31}\Z"  # a member (U…, or W… across an org)


class SlackLinkQuerySet(models.QuerySet["SlackLink"]):
    def for_user(self, user: models.Model) -> SlackLinkQuerySet:
        return self.filter(user=user)


class SlackLink(models.Model):
    """A Slack member, as the Holdpoint user who proved both (contract §10): Slack's Approve
    decides as this user, with this user's roles. Made at /account/ from a link that Holdpoint
    signed for the Slack member who pressed a button, opened by a signed-in user."""

    user = models.ForeignKey("auth.User", on_delete=models.CASCADE, related_name="slack_links")
    slack_team_id = models.CharField(max_length=32)
    slack_user_id = models.CharField(max_length=32)
    created_at = models.DateTimeField(default=timezone.now)

    objects = SlackLinkQuerySet.as_manager()

    class Meta:
        constraints = [
            # A Slack member is one Holdpoint user (the lookup of every button press) ...
            models.UniqueConstraint(fields=["slack_team_id", "slack_user_id"], name="slacklink_unique_member"),
            # ... and a user has one Slack id per workspace.
            models.UniqueConstraint(fields=["user", "slack_team_id"], name="slacklink_unique_user_workspace"),
            models.CheckConstraint(
                condition=Q(slack_team_id__regex=SLACK_TEAM_ID_RE) & Q(slack_user_id__regex=SLACK_USER_ID_RE),
                name="slacklink_ids_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.slack_user_id}@{self.slack_team_id}"
