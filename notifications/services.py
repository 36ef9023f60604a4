"""Every write of notifications: channels (create, disable, rotate, test), the flush of a
channel's notices into one message per batching window, and the watch sweep that writes
reminders, expiry warnings and escalations (contract §9)."""

from __future__ import annotations

import re
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from accounts.away import away_user_ids, stand_in_ids
from accounts.groups import GroupError, group_exists, group_name_check
from accounts.models import Team
from envelopes.models import TOOL_NAME_RE, Step, Tool
from outbound import ssrf
from outbound.signing import secret_generate

from . import content as contents
from .consumer import ENTERED, GROUP_TARGET, watch_next_due
from .models import EVENTS, MAX_REMINDERS, Channel, Message, Notice, SlackLink, Watch

REVIEWERS = "@reviewers"
MAX_ADDRESSES = 50
MAX_WINDOW_S = 24 * 3600
MAX_DELAY_S = 30 * 24 * 3600


class ChannelInvalid(ValueError):
    """A channel setting that cannot be used; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class NewChannel:
    channel: Channel
    secret: str  # a webhook channel's signing secret, shown once ("" for other kinds)


# --- checking what an admin asks for -------------------------------------------------------------


def _url_checked(url: str, field: str) -> str:
    url = url.strip()
    try:
        parsed = ssrf.url_parse(url)
        if parsed.scheme != "https" and not ssrf.private_targets_allowed():
            raise ssrf.UnsafeTarget("only https URLs are allowed")
        ssrf.url_check(url)
    except ssrf.UnsafeTarget as refusal:
        raise ChannelInvalid(field, str(refusal)) from refusal
    return url


def target_clean(kind: str, target: str) -> str:
    target = (target or "").strip()
    if not target:
        raise ChannelInvalid("target", "a target is required")
    if kind == Channel.Kind.EMAIL:
        if target == REVIEWERS:
            return target
        if target.startswith(GROUP_TARGET):
            try:
                group_name_check(target.removeprefix(GROUP_TARGET), field="target")
            except GroupError as error:
                raise ChannelInvalid("target", f"{GROUP_TARGET}NAME names a reviewer group: {error}") from error
            return target
        addresses = [address.strip() for address in target.split(",") if address.strip()]
        if not addresses or len(addresses) > MAX_ADDRESSES:
            raise ChannelInvalid(
                "target", f"1 to {MAX_ADDRESSES} comma-separated addresses, {REVIEWERS} or {GROUP_TARGET}NAME"
            )
        for address in addresses:
            try:
                validate_email(address)
            except ValidationError as error:
                raise ChannelInvalid("target", f"not an email address: {address[:100]}") from error
        return ", ".join(addresses)
    if kind in (Channel.Kind.SLACK, Channel.Kind.WEBHOOK):
        return _url_checked(target, "target")
    raise ChannelInvalid("kind", "kind is one of email, slack, webhook")


def events_clean(events: list[str] | None) -> list[str]:
    if events is None:
        return list(EVENTS[:4])
    events = [event.strip() for event in events if event.strip()]
    unknown = [event for event in events if event not in EVENTS]
    if unknown or not events:
        raise ChannelInvalid("events", f"events are among {', '.join(EVENTS)} (at least one)")
    return [event for event in EVENTS if event in events]


def tools_clean(tools: list[str] | None) -> list[str]:
    tools = sorted({tool.strip() for tool in tools or [] if tool.strip()})
    for tool in tools:
        if not re.match(TOOL_NAME_RE, tool):
            raise ChannelInvalid("tools", f"not a tool name: {tool[:100]}")
    return tools


def _bounded(field: str, value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise ChannelInvalid(field, f"{field} is between {low} and {high}")
    return value


# --- channels --------------------------------------------------------------------------------------


@transaction.atomic
def channel_create(
    *,
    team: Team,
    kind: str,
    target: str,
    events: list[str] | None = None,
    tools: list[str] | None = None,
    name: str = "",
    batch_window_s: int | None = None,
    remind_after_s: int | None = None,
    escalate_to: Channel | None = None,
    escalate_after_s: int | None = None,
) -> NewChannel:
    """Add a channel; raises ChannelInvalid naming the field. A webhook channel gets its own
    signing secret (returned, to be shown once)."""
    if kind not in Channel.Kind.values:
        raise ChannelInvalid("kind", "kind is one of email, slack, webhook")
    if escalate_to is not None and escalate_to.team_id != team.pk:
        raise ChannelInvalid("escalate_to", "no such channel in this team")
    if (escalate_to is None) != (escalate_after_s is None):
        raise ChannelInvalid("escalate_after_s", "escalation needs both a channel and escalate_after_s")
    target = target_clean(kind, target)
    if target.startswith(GROUP_TARGET) and not group_exists(team=team, name=target.removeprefix(GROUP_TARGET)):
        raise ChannelInvalid("target", f"{target} names no group of the team (make it at /teams/{team.slug}/groups/)")
    secret = secret_generate() if kind == Channel.Kind.WEBHOOK else ""
    channel = Channel.objects.create(
        team=team,
        kind=kind,
        name=name.strip()[:100],
        target=target,
        events=events_clean(events),
        tools=tools_clean(tools),
        batch_window_s=60 if batch_window_s is None else _bounded("batch_window_s", batch_window_s, 0, MAX_WINDOW_S),
        remind_after_s=3600 if remind_after_s is None else _bounded("remind_after_s", remind_after_s, 60, MAX_DELAY_S),
        escalate_to=escalate_to,
        escalate_after_s=None
        if escalate_after_s is None
        else _bounded("escalate_after_s", escalate_after_s, 0, MAX_DELAY_S),
        secret=secret,
    )
    return NewChannel(channel=channel, secret=secret)


@transaction.atomic
def channel_disable(*, channel: Channel, reason: str, now: datetime | None = None) -> int:
    """Disable a channel: nothing more is written for it or sent through it. Returns how many
    pending notices and messages it drops."""
    now = now or timezone.now()
    Channel.objects.filter(pk=channel.pk).update(disabled_at=now, disabled_reason=reason[:100])
    channel.disabled_at, channel.disabled_reason = now, reason[:100]
    dropped = Notice.objects.filter(channel=channel, status=Notice.Status.PENDING).update(status=Notice.Status.DROPPED)
    dropped += Message.objects.filter(channel=channel, status=Message.Status.PENDING).update(
        status=Message.Status.DROPPED
    )
    Watch.objects.filter(channel=channel, due_at__isnull=False).update(due_at=None)
    return dropped


def channel_secret_rotate(*, channel: Channel) -> str:
    """A new signing secret for a webhook channel, used from the next try on (shown once)."""
    if channel.kind != Channel.Kind.WEBHOOK:
        raise ChannelInvalid("kind", "only a webhook channel has a signing secret")
    secret = secret_generate()
    Channel.objects.filter(pk=channel.pk).update(secret=secret)
    channel.secret = secret
    return secret


# --- messages ------------------------------------------------------------------------------------


def group_addresses(team_id: int, group: str, now: datetime | None = None) -> list[str]:
    """The email addresses of a group's members who still decide in the team; those away are
    left out and their delegates put in (contract §12: the delegate decides for them)."""
    now = now or timezone.now()
    users = (
        get_user_model()
        .objects.filter(memberships__team_id=team_id, memberships__role__in=["reviewer", "admin"], is_active=True)
        .filter(
            Q(group_memberships__group__team_id=team_id, group_memberships__group__name=group)
            | Q(pk__in=stand_in_ids(team_id, group, now))
        )
        .exclude(pk__in=away_user_ids(team_id, now))
    )
    return sorted({email for email in users.values_list("email", flat=True) if email})


def reviewer_addresses(team_id: int, now: datetime | None = None) -> list[str]:
    """The email addresses of the team's reviewers and admins, but those away (contract §12:
    an away reviewer is not notified; their delegate, a reviewer too, is)."""
    users = (
        get_user_model()
        .objects.filter(memberships__team_id=team_id, memberships__role__in=["reviewer", "admin"], is_active=True)
        .exclude(pk__in=away_user_ids(team_id, now or timezone.now()))
    )
    return sorted({email for email in users.values_list("email", flat=True) if email})


def message_build(*, channel: Channel, content: contents.Content, now: datetime) -> Message:
    subject, text, html = contents.render_email(content)
    body = ""
    recipients: list[str] = []
    if channel.kind == Channel.Kind.EMAIL:
        if channel.target == REVIEWERS:
            recipients = reviewer_addresses(channel.team_id, now)
        elif channel.target.startswith(GROUP_TARGET):
            recipients = group_addresses(channel.team_id, channel.target.removeprefix(GROUP_TARGET), now)
        else:
            recipients = [address.strip() for address in channel.target.split(",") if address.strip()]
    elif channel.kind == Channel.Kind.SLACK:
        import json

        body = json.dumps(contents.render_slack(content), separators=(",", ":"), ensure_ascii=False)
    else:
        body = contents.render_webhook(content, now=now)
    return Message.objects.create(
        team_id=channel.team_id,
        channel=channel,
        message_id="ntf_" + uuid.uuid4().hex,
        kind=content.kind,
        subject=subject,
        text=text,
        html=html if channel.kind == Channel.Kind.EMAIL else "",
        body=body,
        recipients=recipients,
        next_try_at=now,
        created_at=now,
    )


def channel_test(*, channel: Channel, now: datetime | None = None) -> Message:
    """A test message, built now and due now (outside the batching window: an admin asked)."""
    now = now or timezone.now()
    team = Team.objects.get(pk=channel.team_id)
    return message_build(channel=channel, content=contents.test_content(team=team.slug), now=now)


def notice_is_live(notice: Notice) -> bool:
    """A step notice is live while its step is still held in the entry it announces."""
    if notice.step_id is None:
        return True
    step = notice.step
    assert step is not None
    return step.held and step.state_entered_at == notice.entered_at


def channels_flush(*, now: datetime | None = None) -> int:
    """Flush every channel whose pending notices may go now; returns how many messages."""
    now = now or timezone.now()
    channel_ids = (
        Channel.objects.filter(notices__status=Notice.Status.PENDING)
        .filter(Q(window_ends_at__isnull=True) | Q(window_ends_at__lte=now))
        .values_list("id", flat=True)
        .distinct()
    )
    return sum(channel_flush(channel_id=pk, now=now) is not None for pk in list(channel_ids))


@transaction.atomic
def channel_flush(*, channel_id: int, now: datetime | None = None) -> Message | None:
    """One message of the channel's pending notices, if its batching window allows one now:
    the first at once, then one digest per window. A notice whose step was decided (or moved)
    before this is dropped; steps of a tool halted in the same batch are folded into the halt."""
    now = now or timezone.now()
    channel = (
        Channel.objects.select_for_update(skip_locked=True, of=("self",))
        .select_related("team")
        .filter(pk=channel_id)
        .first()
    )
    if channel is None or (channel.window_ends_at is not None and channel.window_ends_at > now):
        return None
    pending = list(
        channel.notices.pending()
        .select_related("step", "step__tool", "step__last_envelope", "escalated_from")
        .select_for_update(of=("self",))
        .order_by("created_at", "id")
    )
    if channel.disabled:
        Notice.objects.filter(pk__in=[n.pk for n in pending]).update(status=Notice.Status.DROPPED)
        return None
    live = [notice for notice in pending if notice_is_live(notice)]
    stale = [notice.pk for notice in pending if notice not in live]
    Notice.objects.filter(pk__in=stale).update(status=Notice.Status.DROPPED)
    # A halted tool is one message: its held steps are folded into the halt's (in this batch,
    # or the one already sent while the tool is still halted).
    halted = {notice.tool for notice in live if notice.step_id is None}
    if "tool.halted" in channel.events:
        halted |= set(
            Tool.objects.filter(
                team_id=channel.team_id,
                name__in={notice.tool for notice in live if notice.step_id is not None},
                halted_until__gt=now,
            ).values_list("name", flat=True)
        )
    folded = [notice for notice in live if notice.step_id is not None and notice.tool in halted]
    live = [notice for notice in live if notice not in folded]
    if not live:
        return None
    held = Counter(
        Step.objects.held().filter(team_id=channel.team_id, tool__name__in=halted).values_list("tool__name", flat=True)
    )
    content = contents.content_build(team=channel.team.slug, notices=live, now=now, held=dict(held))
    message = message_build(channel=channel, content=content, now=now)
    Notice.objects.filter(pk__in=[n.pk for n in live]).update(status=Notice.Status.SENT, message=message)
    Notice.objects.filter(pk__in=[n.pk for n in folded]).update(status=Notice.Status.FOLDED, message=message)
    channel.window_ends_at = now + timedelta(seconds=channel.batch_window_s)
    Channel.objects.filter(pk=channel.pk).update(window_ends_at=channel.window_ends_at)
    return message


# --- reminders, expiry warnings, escalations --------------------------------------------------------


def watches_sweep(*, now: datetime | None = None, limit: int = 500) -> int:
    """Write the notices that held steps owe by now; returns how many."""
    now = now or timezone.now()
    written = 0
    with transaction.atomic():
        watches = list(
            Watch.objects.filter(due_at__lte=now)
            .select_related("channel", "channel__escalate_to", "step", "step__tool", "step__last_envelope")
            .select_for_update(skip_locked=True, of=("self",))
            .order_by("due_at")[:limit]
        )
        for watch in watches:
            written += _watch_advance(watch, now=now)
    return written


def _watch_advance(watch: Watch, *, now: datetime) -> int:
    channel, step = watch.channel, watch.step
    if channel.disabled or not step.held or step.state_entered_at != watch.entered_at:
        watch.due_at = None  # decided, moved on, or nobody to tell: it owes nothing more
        watch.save(update_fields=["due_at"])
        return 0
    notices: list[Notice] = []

    def notice(event: str, target: Channel, **extra: object) -> None:
        notices.append(
            Notice(
                team_id=watch.team_id,
                channel=target,
                event=event,
                step=step,
                tool=step.tool.name,
                entered_at=watch.entered_at,
                created_at=now,
                **extra,  # type: ignore[arg-type]
            )
        )

    remind_at = watch.announced_at + timedelta(seconds=channel.remind_after_s * (watch.reminders + 1))
    if "step.overdue" in channel.events and watch.reminders < MAX_REMINDERS and now >= remind_at:
        if channel.wants("step.overdue", step.tool.name):
            notice("step.overdue", channel)
        watch.reminders += 1
    if watch.state == "awaiting_approval" and "approval.expiring" in channel.events and not watch.expiring_sent:
        from .consumer import expiry_warning_at

        if step.expires_at is not None and now >= expiry_warning_at(
            entered_at=watch.entered_at, expires_at=step.expires_at
        ):
            if channel.wants("approval.expiring", step.tool.name):
                notice("approval.expiring", channel)
            watch.expiring_sent = True
    if (
        channel.escalate_to is not None
        and channel.escalate_after_s is not None
        and not watch.escalated
        and now >= watch.announced_at + timedelta(seconds=channel.escalate_after_s)
    ):
        target = channel.escalate_to
        if not target.disabled and target.wants_tool(step.tool.name):
            notice(ENTERED.get(watch.state, "step.escalated"), target, escalated_from=channel)
        watch.escalated = True
    watch.due_at = watch_next_due(watch, channel, expires_at=step.expires_at)
    watch.save(update_fields=["reminders", "expiring_sent", "escalated", "due_at"])
    Notice.objects.bulk_create(notices)
    return len(notices)


# --- Slack members linked to users (contract §10) ----------------------------------------------


class SlackLinkRefused(ValueError):
    """A link that cannot be made; the message says why."""


@transaction.atomic
def slack_link_create(*, user: User, slack_team_id: str, slack_user_id: str) -> SlackLink:
    """Link this Slack member to `user` (the caller proved both: a signed-in session and a link
    Holdpoint signed for that member). One Slack id per user per workspace; a member is one
    user. Linking again the same pair returns the link."""
    existing = SlackLink.objects.select_for_update().filter(slack_team_id=slack_team_id, slack_user_id=slack_user_id)
    link = existing.first()
    if link is not None:
        if link.user_id == user.pk:
            return link
        raise SlackLinkRefused("This Slack account is linked to another Holdpoint user; they must unlink it first.")
    if SlackLink.objects.filter(user=user, slack_team_id=slack_team_id).exists():
        raise SlackLinkRefused("You have another Slack account of this workspace linked; unlink it first.")
    try:
        with transaction.atomic():
            return SlackLink.objects.create(user=user, slack_team_id=slack_team_id, slack_user_id=slack_user_id)
    except IntegrityError as error:  # a link made at the same moment
        raise SlackLinkRefused("This Slack account was just linked; reload the page.") from error


def slack_link_delete(*, user: User, link_id: int) -> bool:
    """Unlink one of the user's own Slack accounts; False when it is not theirs."""
    return SlackLink.objects.for_user(user).filter(pk=link_id).delete()[0] > 0
