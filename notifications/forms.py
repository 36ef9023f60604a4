"""The notifications page's forms (team admins)."""

from __future__ import annotations

from django import forms

from dashboard.once import OnceForm

from .models import DEFAULT_EVENTS, EVENTS, Channel


class ChannelCreateForm(OnceForm):
    team = forms.SlugField()
    kind = forms.ChoiceField(choices=Channel.Kind.choices)
    target = forms.CharField(max_length=2000)
    name = forms.CharField(max_length=100, required=False)
    events = forms.MultipleChoiceField(
        choices=[(event, event) for event in EVENTS], initial=list(DEFAULT_EVENTS), widget=forms.CheckboxSelectMultiple
    )
    tools = forms.CharField(max_length=2000, required=False)

    def tool_list(self) -> list[str]:
        return [tool.strip() for tool in self.cleaned_data.get("tools", "").split(",") if tool.strip()]


class ChannelRotateForm(OnceForm):
    pass


class ChannelDisableForm(forms.Form):
    reason = forms.CharField(max_length=80, required=False)
