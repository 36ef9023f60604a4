"""The catalog form of the tool page: add, change or document one error code."""

from __future__ import annotations

from django import forms
from django.core.validators import RegexValidator

from envelopes.models import CODE_RE, ErrorCode, Tool

from .queries import UndocumentedCode

# The retry class that matches the next action agents sent with an undocumented code.
RETRY_CLASS_OF_ACTION = {
    "wait_and_retry": ErrorCode.RetryClass.TRANSIENT,
    "correct_input": ErrorCode.RetryClass.CORRECTABLE,
    "abort": ErrorCode.RetryClass.ABORT,
}


class ErrorCodeForm(forms.Form):
    code = forms.CharField(max_length=64, validators=[RegexValidator(CODE_RE, "UPPER_SNAKE_CASE, 2 to 64 characters.")])
    scope = forms.ChoiceField(choices=[("tool", "This tool"), ("team", "Every tool of the team")], initial="tool")
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


class ToolSettingsForm(forms.Form):
    """A tool's recovery settings (contract §1), as a team admin changes them on the tool page.
    The rules between them (a deadline not below the window, ...) are the service's."""

    side_effects = forms.BooleanField(required=False, label="Writes (side effects)")
    required_approvals = forms.TypedChoiceField(
        choices=[(1, "1"), (2, "2 (four eyes)"), (3, "3"), (4, "4"), (5, "5")], coerce=int, label="Approvals required"
    )
    on_approval_expiry = forms.ChoiceField(
        choices=[("cancel", "cancel it"), ("escalate", "escalate it to a human")],
        label="An expired request for approval",
        required=False,
    )
    approver_group = forms.CharField(
        required=False,
        max_length=40,
        label="Approver group",
        help_text="Only this group's members approve, reject or edit (empty: any reviewer).",
    )
    escalate_after_s = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=30 * 86400,
        label="Escalate after (s)",
        help_text="A request for approval still waiting this long may also be decided by the group below.",
    )
    escalate_to = forms.CharField(
        required=False, max_length=40, label="Escalate to group", help_text="Its members are notified (@group:NAME)."
    )
    max_attempts = forms.IntegerField(min_value=1, max_value=1000, label="Attempts at most")
    consistency_window_s = forms.IntegerField(min_value=0, max_value=7 * 86400, label="Consistency window (s)")
    verification_deadline_s = forms.IntegerField(min_value=0, max_value=30 * 86400, label="Verification deadline (s)")
    approval_ttl_s = forms.IntegerField(min_value=1, max_value=30 * 86400, label="Approval expires after (s)")
    halt_cooldown_s = forms.IntegerField(min_value=0, max_value=7 * 86400, label="Halt cooldown (s)")
    safe_detail_keys = forms.CharField(
        required=False, max_length=2000, label="Extra safe_details keys", help_text="Comma-separated identifiers."
    )
    strict_codes = forms.BooleanField(required=False, label="Refuse undocumented codes")

    def clean_on_approval_expiry(self) -> str:
        return self.cleaned_data["on_approval_expiry"] or "cancel"

    def clean_approver_group(self) -> str:
        return str(self.cleaned_data["approver_group"]).strip()

    def clean_escalate_to(self) -> str:
        return str(self.cleaned_data["escalate_to"]).strip()

    def clean_safe_detail_keys(self) -> list[str]:
        return [key.strip() for key in self.cleaned_data["safe_detail_keys"].split(",") if key.strip()]

    @classmethod
    def for_tool(cls, tool: Tool) -> ToolSettingsForm:
        initial = {name: getattr(tool, name) for name in cls.base_fields}
        initial["safe_detail_keys"] = ", ".join(tool.safe_detail_keys)
        return cls(initial=initial)
