"""The editor's and the grants page's forms (validation of shape only: the rules' own checks are
policy's, run on the draft)."""

from __future__ import annotations

from typing import Any

from django import forms

from envelopes.models import TOOL_NAME_RE

EXPIRY_CHOICES = [
    (str(3600), "1 hour"),
    (str(4 * 3600), "4 hours"),
    (str(24 * 3600), "1 day"),
    (str(3 * 24 * 3600), "3 days"),
    (str(7 * 24 * 3600), "7 days"),
]


class RulesEditForm(forms.Form):
    rules = forms.CharField(widget=forms.Textarea, required=False, max_length=1024 * 1024, strip=False)
    base_version = forms.IntegerField(min_value=0, widget=forms.HiddenInput)
    rule = forms.CharField(required=False, max_length=64, widget=forms.HiddenInput)  # "": the whole set


class GrantForm(forms.Form):
    tool = forms.RegexField(regex=TOOL_NAME_RE, max_length=100)
    when = forms.CharField(max_length=2048, strip=False, initial="true")
    scope = forms.ChoiceField(choices=[("team", "any call of the team"), ("run", "one run"), ("key", "one API key")])
    scope_value = forms.CharField(max_length=200, required=False)
    expires_in_s = forms.TypedChoiceField(choices=EXPIRY_CHOICES, coerce=int, initial=str(3600))
    max_uses = forms.IntegerField(min_value=1, max_value=1000, initial=20)

    def grant_arguments(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "tool": data["tool"],
            "when": data["when"],
            "scope": data["scope"],
            "scope_value": data["scope_value"].strip() if data["scope"] != "team" else "",
            "expires_in_s": data["expires_in_s"],
            "max_uses": data["max_uses"],
        }
