"""The webhooks page's forms (team admins)."""

from __future__ import annotations

from django import forms

from dashboard.once import OnceForm


class EndpointCreateForm(OnceForm):
    team = forms.SlugField()
    url = forms.URLField(max_length=2000, assume_scheme="https")


class EndpointRotateForm(OnceForm):
    pass


class EndpointDisableForm(forms.Form):
    reason = forms.CharField(max_length=80, required=False)
