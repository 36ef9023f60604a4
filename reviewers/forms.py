"""The tokens page's form."""

from __future__ import annotations

from datetime import datetime, timedelta

from django import forms
from django.utils import timezone

from dashboard.once import OnceForm

from .services import NAME_MAX

EXPIRY_CHOICES = [
    ("", "never"),
    ("7", "in 7 days"),
    ("30", "in 30 days"),
    ("90", "in 90 days"),
    ("365", "in a year"),
]


class ReviewerTokenCreateForm(OnceForm):
    name = forms.CharField(max_length=NAME_MAX, help_text="What uses it, e.g. 'laptop CLI' or 'ChatOps bot'.")
    expires_in = forms.TypedChoiceField(choices=EXPIRY_CHOICES, required=False, coerce=int, empty_value=None)

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if not name or not name.isprintable():
            raise forms.ValidationError("A name of printable characters.", code="invalid")
        return name

    def expires_at(self) -> datetime | None:
        days = self.cleaned_data.get("expires_in")
        return timezone.now() + timedelta(days=days) if days else None
