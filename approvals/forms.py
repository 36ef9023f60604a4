"""Dashboard forms: queue filters, search, a reviewer's decision, a halted tool's case."""

from __future__ import annotations

from django import forms
from django.core.validators import RegexValidator

from dashboard.once import OnceForm
from envelopes.models import TOOL_NAME_RE

from .models import Decision
from .queries import AGE_RE, QueueFilters, parse_age
from .services import REASON_REQUIRED

REASON_MAX = 1000

AGE_CHOICES = [
    ("", "any age"),
    ("5m", "older than 5 min"),
    ("15m", "older than 15 min"),
    ("1h", "older than 1 h"),
    ("4h", "older than 4 h"),
    ("24h", "older than 24 h"),
    ("7d", "older than 7 days"),
]


class QueueFilterForm(forms.Form):
    """`?team=&tool=&code=&age=`; a value that does not parse is ignored, never an error page."""

    team = forms.SlugField(required=False)
    tool = forms.CharField(required=False, validators=[RegexValidator(TOOL_NAME_RE)])
    code = forms.CharField(required=False)
    age = forms.CharField(required=False, validators=[RegexValidator(AGE_RE.pattern)])

    def clean_code(self) -> str:
        return self.cleaned_data["code"].strip()[:64]

    def filters(self) -> QueueFilters:
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        return QueueFilters(
            team=data.get("team") or "",
            tool=data.get("tool") or "",
            code=data.get("code") or "",
            age=parse_age(data.get("age") or ""),
        )


class DecisionForm(forms.Form):
    action = forms.ChoiceField(choices=Decision.Action.choices)
    reason = forms.CharField(
        required=False,
        max_length=REASON_MAX,
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    expected_state = forms.CharField(max_length=20)
    expected_since = forms.DateTimeField(required=False)

    def clean(self) -> dict:
        data = super().clean() or {}
        if data.get("action") in REASON_REQUIRED and not (data.get("reason") or "").strip():
            self.add_error("reason", "A reason is required for this decision.")
        return data


class ToolResumeForm(forms.Form):
    team = forms.SlugField()
    reason = forms.CharField(required=False, max_length=REASON_MAX)


class ToolCancelHeldForm(forms.Form):
    team = forms.SlugField()
    reason = forms.CharField(max_length=REASON_MAX, error_messages={"required": "A reason is required."})

    def clean_reason(self) -> str:
        reason = self.cleaned_data["reason"].strip()
        if not reason:
            raise forms.ValidationError("A reason is required.")
        return reason


class ApiKeyCreateForm(OnceForm):
    team = forms.SlugField()
    name = forms.CharField(max_length=100, help_text="Who uses it, e.g. the agent runtime's name.")

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if not name or not name.isprintable():
            raise forms.ValidationError("A name of printable characters.", code="invalid")
        return name
