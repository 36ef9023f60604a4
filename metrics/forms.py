"""The catalog form of the tool page: add, change or document one error code."""

from __future__ import annotations

from django import forms
from django.core.validators import RegexValidator

from envelopes.models import CODE_RE, ErrorCode

from .queries import UndocumentedCode

# The retry class that matches the next action agents sent with an undocumented code.
RETRY_CLASS_OF_ACTION = {
    "wait_and_retry": ErrorCode.RetryClass.TRANSIENT,
    "correct_input": ErrorCode.RetryClass.CORRECTABLE,
    "abort": ErrorCode.RetryClass.ABORT,
}


class ErrorCodeForm(forms.Form):
    code = forms.CharField(max_length=64, validators=[RegexValidator(CODE_RE, "UPPER_SNAKE_CASE, 2 to 64 characters.")])
    scope = forms.ChoiceField(
        choices=[("tool", "This tool"), ("team", "Every tool of the team")], initial="tool"
    )
    category = forms.ChoiceField(choices=ErrorCode.Category.choices)
    retry_class = forms.ChoiceField(choices=ErrorCode.RetryClass.choices)
    next_action = forms.ChoiceField(choices=ErrorCode.NextAction.choices)
    side_effect = forms.ChoiceField(choices=ErrorCode.SideEffect.choices, initial=ErrorCode.SideEffect.UNKNOWN)
    description = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))
    hint = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))

    FIELDS = ("category", "retry_class", "next_action", "side_effect", "description", "hint")

    def entry_fields(self) -> dict[str, str]:
        return {name: self.cleaned_data[name] for name in self.FIELDS}


def initial_for_undocumented(seen: UndocumentedCode) -> dict[str, str]:
    """The one-step "Document it" form: what agents sent with the code, ready to confirm."""
    category, next_action = seen.category, seen.next_action
    return {
        "code": seen.code,
        "scope": "tool",
        "category": category if category in ErrorCode.Category.values else ErrorCode.Category.INTERNAL,
        "next_action": next_action if next_action in ErrorCode.NextAction.values else ErrorCode.NextAction.ESCALATE,
        "retry_class": RETRY_CLASS_OF_ACTION.get(next_action, ErrorCode.RetryClass.ESCALATE),
        "side_effect": ErrorCode.SideEffect.UNKNOWN,
    }


def initial_for_entry(entry: ErrorCode) -> dict[str, str]:
    return {
        "code": entry.code,
        "scope": "tool" if entry.tool_id else "team",
        **{name: getattr(entry, name) for name in ErrorCodeForm.FIELDS},
    }
