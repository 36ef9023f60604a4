"""Admin for webhook endpoints and the outbox (dead letters included)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from . import ssrf
from .models import DeliveryTry, OutboxMessage, WebhookEndpoint
from .services import WebhookError, endpoint_disable, endpoint_secret_rotate, message_redeliver
from .signing import secret_generate


class WebhookEndpointForm(forms.ModelForm):
    url = forms.URLField(max_length=2000, assume_scheme="https")

    class Meta:
        model = WebhookEndpoint
        fields = ["team", "url", "active"]

    def clean_url(self) -> str:
        url = self.cleaned_data["url"].strip()
        try:
            ssrf.url_check(url)
        except ssrf.UnsafeTarget as refusal:
            raise forms.ValidationError(str(refusal)) from refusal
        return url


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    form = WebhookEndpointForm
    list_display = ["url", "team", "active", "disabled_reason", "created_at"]
    list_filter = ["active", "team"]
    search_fields = ["url"]
    readonly_fields = ["secret_hint", "disabled_reason", "disabled_at", "created_at"]
    actions = ["rotate_secret", "disable"]

    @admin.display(description="secret")
    def secret_hint(self, endpoint: WebhookEndpoint) -> str:
        return endpoint.secret[:10] + "…" if endpoint.secret else "(generated on save)"

    def save_model(self, request: HttpRequest, obj: WebhookEndpoint, form: Any, change: bool) -> None:
        if not change:
            obj.secret = secret_generate()
        elif "active" in form.changed_data and obj.active:
            obj.disabled_reason, obj.disabled_at = "", None
        super().save_model(request, obj, form, change)
        if not change:
            self.message_user(
                request,
                f"Signing secret (shown once, give it to the receiver): {obj.secret}",
                messages.WARNING,
            )

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # its messages and their tries (step timelines) would go with it: disable it

    @admin.action(description="Rotate the signing secret (shown once)")
    def rotate_secret(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        for endpoint in queryset:
            secret = endpoint_secret_rotate(endpoint=endpoint)
            self.message_user(request, f"{endpoint.url}: new secret {secret}", messages.WARNING)

    @admin.action(description="Disable (pending messages become dead letters)")
    def disable(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        for endpoint in queryset.filter(active=True):
            endpoint_disable(endpoint=endpoint, reason=f"disabled by {request.user}")


class DeliveryTryInline(admin.TabularInline):
    model = DeliveryTry
    extra = 0
    can_delete = False
    fields = readonly_fields = ("number", "tried_at", "status_code", "latency_ms", "error", "next_try_at")
    ordering = ["number"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(OutboxMessage)
class OutboxMessageAdmin(admin.ModelAdmin):
    list_display = [
        "message_id",
        "event_type",
        "team",
        "endpoint",
        "status",
        "dead_reason",
        "tries",
        "next_try_at",
        "created_at",
    ]
    list_filter = ["status", "dead_reason", "event_type", "team"]
    search_fields = ["message_id", "step__operation_ref"]
    date_hierarchy = "created_at"
    inlines = [DeliveryTryInline]
    actions = ["redeliver"]
    readonly_fields = [
        "team",
        "endpoint",
        "step",
        "message_id",
        "event_type",
        "body",
        "status",
        "dead_reason",
        "tries",
        "next_try_at",
        "created_at",
        "delivered_at",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # history: read it, redeliver it, never edit it

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Redeliver (one more try now, same webhook-id)")
    def redeliver(self, request: HttpRequest, queryset: QuerySet[OutboxMessage]) -> None:
        done = 0
        for message in queryset.filter(status=OutboxMessage.Status.DEAD):
            try:
                message_redeliver(message=message)
            except WebhookError as refusal:
                self.message_user(request, f"{message.message_id}: {refusal}", messages.ERROR)
            else:
                done += 1
        self.message_user(request, f"{done} message(s) queued for one more try.")
