"""Reviewer tokens in the admin: list and revoke. Never the secret (only its hash is stored, and
the admin does not show even that); tokens are made by their owner at /account/tokens/."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from .models import ReviewerToken
from .services import reviewer_tokens_revoke


@admin.register(ReviewerToken)
class ReviewerTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "name", "user", "created_at", "expires_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter), ("expires_at", admin.EmptyFieldListFilter)]
    list_select_related = ["user"]
    search_fields = ["prefix", "name", "user__username"]
    fields = ["user", "prefix", "name", "created_at", "expires_at", "last_used_at", "revoked_at"]  # never the hash
    readonly_fields = ["user", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def save_model(self, request: HttpRequest, obj: ReviewerToken, form: forms.ModelForm, change: bool) -> None:
        obj.save(update_fields=["name"])  # never put back a revoked_at the form loaded

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a token is shown once to the user who makes it, at /account/tokens/

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Revoke instead: the row keeps when the token was made, last used and revoked, for an
        # inquiry into what it may have done (decisions record the user, not the token).
        return False

    @admin.action(description="Revoke the selected reviewer tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ReviewerToken]) -> None:
        revoked = reviewer_tokens_revoke(queryset)
        self.message_user(
            request, f"Revoked {revoked} reviewer token(s); their next request answers 401.", messages.SUCCESS
        )
