"""Admin: notification channels and their messages, to look at. Channels are made and changed at
/notifications/ or with createchannel (a webhook channel's secret is shown once there); here
nothing shows a secret or a Slack URL (a credential), and message history is never deleted."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from approvals.templatetags.holdpoint import host

from .models import Channel, Message, SendTry, SlackLink


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Channel)
class ChannelAdmin(ReadOnly):
    list_display = ("label", "team", "kind", "to", "disabled_at", "last_success_at", "last_error")
    list_filter = ("kind", "team")
    fields = (
        "team",
        "name",
        "kind",
        "to",
        "events",
        "tools",
        "batch_window_s",
        "remind_after_s",
        "escalate_to",
        "escalate_after_s",
        "disabled_at",
        "disabled_reason",
        "last_success_at",
        "last_error",
        "last_error_at",
    )
    readonly_fields = fields

    @admin.display(description="to")
    def to(self, channel: Channel) -> str:
        return channel.target if channel.kind == Channel.Kind.EMAIL else host(channel.target)


class SendTryInline(admin.TabularInline):
    model = SendTry
    fields = ("number", "tried_at", "ok", "status_code", "error", "next_try_at")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Message)
class MessageAdmin(ReadOnly):
    list_display = ("message_id", "channel", "kind", "status", "tries", "created_at", "sent_at")
    list_filter = ("status", "kind")
    fields = ("message_id", "team", "channel", "kind", "subject", "text", "status", "tries", "next_try_at", "sent_at")
    readonly_fields = fields
    inlines = [SendTryInline]


@admin.register(SlackLink)
class SlackLinkAdmin(admin.ModelAdmin):
    """Slack members linked to users (§10). Users link at /account/; staff may unlink one (a
    person who left), never make one: a link must be proved by both sides."""

    list_display = ("user", "slack_team_id", "slack_user_id", "created_at")
    search_fields = ("user__username", "slack_user_id", "slack_team_id")
    fields = list_display
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
