"""Dashboard forms: queue filters, search, a reviewer's decision, a halted tool's case."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.core.validators import RegexValidator

from dashboard.once import OnceForm
from envelopes.errors import InputInvalid
from envelopes.models import TOOL_NAME_RE, Decision
from envelopes.proposal import INPUT_MAX_BYTES, input_check, input_secret_check

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


# The edited input's text may be indented JSON: room for the indentation around a canonical
# form of INPUT_MAX_BYTES; the canonical limit itself is checked once it parses.
INPUT_TEXT_MAX = 8 * INPUT_MAX_BYTES


class DecisionForm(forms.Form):
    action = forms.ChoiceField(choices=Decision.Action.choices)
    reason = forms.CharField(
        required=False,
        max_length=REASON_MAX,
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    expected_state = forms.CharField(max_length=20)
    expected_since = forms.DateTimeField(required=False)
    # "Edit and approve" (contract §7): `edit` says the reviewer approves their own `input`.
    edit = forms.BooleanField(required=False)
    input = forms.CharField(required=False, strip=False, widget=forms.Textarea)

    def clean(self) -> dict:
        data = super().clean() or {}
        if data.get("action") in REASON_REQUIRED and not (data.get("reason") or "").strip():
            self.add_error("reason", "A reason is required for this decision.")
        data["edited_input"] = None
        if data.get("edit"):
            if data.get("action") != "approve":
                self.add_error("input", "An edited input can only be approved.")
            else:
                try:
                    data["edited_input"] = edited_input_parse(data.get("input") or "")
                except forms.ValidationError as error:
                    self.add_error("input", error)
        return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads would keep the last of two equal keys: the reviewer would approve what they
    # did not read.
    value: dict[str, Any] = {}
    for key, item in pairs:
        if key in value:
            raise ValueError(f"the key {json.dumps(key, ensure_ascii=False)[:80]} appears twice in one object")
        value[key] = item
    return value


def edited_input_parse(text: str) -> dict[str, Any]:
    """A reviewer's edited input: JSON text that parses to an object the attempt gate would take
    (the size and depth limits, a canonical form) and that holds nothing the §2 redaction would
    replace. ValidationError with a message a reviewer can act on."""
    if not text.strip():
        raise forms.ValidationError("The input is empty: write the tool call's arguments as a JSON object.")
    if len(text) > INPUT_TEXT_MAX:
        raise forms.ValidationError(
            f"The input is {len(text)} characters; at most {INPUT_MAX_BYTES} bytes are accepted once canonical."
        )
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise forms.ValidationError(
            f"This is not valid JSON: {error.msg} (line {error.lineno}, column {error.colno}). Nothing was approved."
        ) from error
    except (ValueError, RecursionError) as error:
        raise forms.ValidationError(f"This is not valid JSON: {error}. Nothing was approved.") from error
    try:
        input_check(value, field="input")
        input_secret_check(value, field="input")
    except InputInvalid as invalid:
        raise forms.ValidationError(f"{invalid.detail} Nothing was approved.", code=invalid.rule) from invalid
    return value


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
