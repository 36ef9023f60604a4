"""Admin for teams, their API keys, and users' single sign-on identities.

API keys are created with `manage.py createapikey` (the key is shown once); here they can only
be renamed and revoked.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from .models import ApiKey, OidcIdentity, Team
from .services import api_keys_revoke


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    readonly_fields = ["created_at"]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a team's steps and audit chains go with it: the app never deletes history


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["prefix", "name", "team", "created_at", "revoked_at"]
    list_filter = ["team", ("revoked_at", admin.EmptyFieldListFilter)]
    list_select_related = ["team"]
    search_fields = ["prefix", "name"]
    fields = ["team", "prefix", "name", "created_at", "revoked_at"]  # never the hash
    readonly_fields = ["team", "prefix", "created_at", "revoked_at"]
    actions = ["revoke"]

    def save_model(self, request: HttpRequest, obj: ApiKey, form: forms.ModelForm, change: bool) -> None:
        obj.save(update_fields=["name"])  # never put back a revoked_at the form loaded

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # `manage.py createapikey` shows the new key once; the admin could not

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoke instead: the row says which key a past request used

    @admin.action(description="Revoke the selected API keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        revoked = api_keys_revoke(queryset)
        self.message_user(request, f"Revoked {revoked} API key(s); their next request answers 401.", messages.SUCCESS)


@admin.register(OidcIdentity)
class OidcIdentityAdmin(admin.ModelAdmin):
    """Who signs in as whom with single sign-on. Made at a user's first sign-in only; deleting
    one unlinks it (the next sign-in with that identity creates a new user)."""

    list_display = ["user", "subject", "issuer", "created_at"]
    list_select_related = ["user"]
    search_fields = ["user__username", "subject"]
    readonly_fields = ["user", "issuer", "subject", "created_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
