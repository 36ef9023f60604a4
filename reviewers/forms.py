"""The tokens page's form."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.conf import settings
from django.utils import timezone

from dashboard.once import OnceForm

from .services import NAME_MAX

EXPIRY_DAYS = [7, 30, 90, 365]


def _days(days: int) -> str:
    return "in a year" if days == 365 else f"in {days} days"


class ReviewerTokenCreateForm(OnceForm):
    name = forms.CharField(max_length=NAME_MAX, help_text="What uses it, e.g. 'laptop CLI' or 'ChatOps bot'.")
    expires_in = forms.TypedChoiceField(choices=[], required=False, coerce=int, empty_value=None)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The default lifetime (HOLDPOINT_REVIEWER_TOKEN_DAYS) is offered first; "never" only
        # where that setting is 0.
        default = settings.HOLDPOINT_REVIEWER_TOKEN_DAYS
        field = self.fields["expires_in"]
        assert isinstance(field, forms.TypedChoiceField)
        days = sorted({*EXPIRY_DAYS, default} - {0})
        field.choices = ([("", "never")] if default == 0 else []) + [(str(d), _days(d)) for d in days]
        field.initial = str(default) if default else ""

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if not name or not name.isprintable():
            raise forms.ValidationError("A name of printable characters.", code="invalid")
        return name

    def expires_at(self) -> datetime | None:
        """The chosen expiry; None leaves it to the default lifetime (reviewer_token_create)."""
        days = self.cleaned_data.get("expires_in")
        return timezone.now() + timedelta(days=days) if days else None
