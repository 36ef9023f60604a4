"""Admin for webhook endpoints and the outbox (dead letters included).

A signing secret, new or rotated, is shown once, in the page that answers the POST that made it
(never in a flash message: those sit in the session or a cookie and are shown on whatever page
comes next). Both forms carry a one-time token, so reloading that answer creates no second
endpoint and voids no rotated secret.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from dashboard.once import once_claim, once_token
from outbound import ssrf
from outbound.signing import secret_generate

from .models import DeliveryTry, OutboxMessage, WebhookEndpoint
from .services import WebhookError, endpoint_disable, endpoint_secret_rotate, message_redeliver

ADMIN_CREATE = "admin-webhook-endpoint"
ADMIN_ROTATE = "admin-webhook-rotate"


class WebhookEndpointForm(forms.ModelForm):
    url = forms.URLField(max_length=2000, assume_scheme="https")
    once = forms.UUIDField(widget=forms.HiddenInput, required=False)
    user_id: int | None = None  # set by WebhookEndpointAdmin.get_form

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

    def clean(self) -> dict[str, Any] | None:
        cleaned = super().clean() or {}
        if self.instance.pk is None and not self.errors:
            # Claimed only once the form is otherwise valid: a form sent back with an error
            # keeps its token for the corrected post.
            token = cleaned.get("once")
            if token is None or not once_claim(user_id=self.user_id, purpose=ADMIN_CREATE, token=token):
                raise forms.ValidationError(
                    "This form was already sent: the endpoint was registered then and its secret shown "
                    "once. Find it in the list (rotate its secret for a new one) instead of adding it again."
                )
        return cleaned


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
        return endpoint.secret[:10] + "…" if endpoint.secret else "(generated on save, shown once)"

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form: Any = super().get_form(request, obj, change=change, **kwargs)
        form.user_id = request.user.pk  # a class made for this request by modelform_factory
        if obj is None:
            form.base_fields["once"].initial = once_token()
        return form

    def save_model(self, request: HttpRequest, obj: WebhookEndpoint, form: Any, change: bool) -> None:
        if not change:
            obj.secret = secret_generate()
        elif "active" in form.changed_data and obj.active:
            obj.disabled_reason, obj.disabled_at = "", None
        super().save_model(request, obj, form, change)

    def response_add(
        self, request: HttpRequest, obj: WebhookEndpoint, post_url_continue: str | None = None
    ) -> HttpResponse:
        """The answer to the POST that registered the endpoint shows its secret, once."""
        return self._secrets_page(request, [(obj, obj.secret)], rotated=False)

    def _secrets_page(
        self, request: HttpRequest, secrets: list[tuple[WebhookEndpoint, str]], *, rotated: bool, repeated: bool = False
    ) -> HttpResponse:
        response = TemplateResponse(
            request,
            "webhooks/admin_secrets.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": "New signing secrets" if rotated else "Endpoint registered",
                "secrets": secrets,
                "rotated": rotated,
                "repeated": repeated,
            },
        )
        response["Cache-Control"] = "no-store"
        return response

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # its messages and their tries (step timelines) would go with it: disable it

    @admin.action(description="Rotate the signing secret (shown once)")
    def rotate_secret(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> HttpResponse:
        """First a confirmation page with a one-time token; its POST rotates and answers with
        the new secrets. Posting it again (a reload) rotates nothing."""
        endpoints = list(queryset.order_by("pk"))
        if request.POST.get("post") != "yes":
            return TemplateResponse(
                request,
                "webhooks/admin_rotate_confirm.html",
                {
                    **self.admin_site.each_context(request),
                    "opts": self.opts,
                    "title": "Rotate signing secrets?",
                    "endpoints": endpoints,
                    "once": once_token(),
                    "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                },
            )
        token = forms.UUIDField(required=False).clean(request.POST.get("once") or None)
        if token is None or not once_claim(user_id=request.user.pk, purpose=ADMIN_ROTATE, token=token):
            return self._secrets_page(request, [], rotated=True, repeated=True)
        secrets = [(endpoint, endpoint_secret_rotate(endpoint=endpoint)) for endpoint in endpoints]
        return self._secrets_page(request, secrets, rotated=True)

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
