"""Admin for the tools' settings.

Steps, envelopes and the audit log are not here: they change only through the state machine
(the dashboard and the API), and the audit log never changes. Teams and API keys: accounts.admin.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from .configuration import tool_configure, tool_settings_problems
from .models import Tool


class ToolAdminForm(forms.ModelForm):
    class Meta:
        model = Tool
        fields = [
            "side_effects", "required_approvals", "max_attempts", "consistency_window_s", "verification_deadline_s",
            "approval_ttl_s", "halt_cooldown_s", "safe_detail_keys", "strict_codes",
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not self.errors:
            for name, value in data.items():
                setattr(self.instance, name, value)
            for problem in tool_settings_problems(self.instance):
                self.add_error(None, problem)
        return data


@admin.register(Tool)
class ToolAdmin(admin.ModelAdmin):
    """The recovery settings of contract §1. A tool registers itself the first time an agent
    names it; its circuit is resumed from the dashboard, not here."""

    form = ToolAdminForm
    list_display = [
        "name", "team", "side_effects", "max_attempts", "required_approvals", "strict_codes", "halted_until",
    ]
    list_filter = ["team", "side_effects", "strict_codes"]
    list_select_related = ["team"]
    search_fields = ["name"]
    readonly_fields = ["team", "name", "halted_until", "halted_reason", "halted_at", "created_at"]
    fields = ["team", "name", *ToolAdminForm.Meta.fields, "halted_until", "halted_reason", "halted_at", "created_at"]

    def save_model(self, request: HttpRequest, obj: Tool, form: forms.ModelForm, change: bool) -> None:
        # Through the service, which locks the row and writes the settings alone (the circuit
        # and the audit chain head move under the app's own writes meanwhile: a whole-row save
        # of what the form loaded would put them back), and audits who changed what.
        tool_configure(
            team=obj.team,
            name=obj.name,
            settings={name: form.cleaned_data[name] for name in ToolAdminForm.Meta.fields},
            actor=f"admin:{request.user.get_username()}",
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tools register on first use, or with `manage.py configuretool`

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # its steps and audit chain refer to it
