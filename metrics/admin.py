"""Admin for the error-code catalog (contract §1): the same entries the tool page edits.

An entry names a tool, or no tool for a team-wide one; the tool must be one of the team's.
The model's validators and constraints (code pattern, known category, retry class, next action
and side effect, one entry per code and tool or per code team-wide) are checked on save.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin

from envelopes.models import ErrorCode, Tool


class TeamToolChoiceField(forms.ModelChoiceField):
    """Two teams may each have a tool of the same name: label them by team."""

    def label_from_instance(self, obj: Any) -> str:
        return f"{obj.team.slug} / {obj.name}"


class ErrorCodeAdminForm(forms.ModelForm):
    class Meta:
        model = ErrorCode
        fields = [
            "team", "tool", "code", "category", "retry_class", "next_action", "side_effect", "description", "hint",
        ]
        help_texts = {
            "tool": "Leave empty for a team-wide entry (every tool of the team).",
            "code": "UPPER_SNAKE_CASE, as agents send it.",
        }
        field_classes = {"tool": TeamToolChoiceField}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "tool" in self.fields:
            field = self.fields["tool"]
            assert isinstance(field, forms.ModelChoiceField)
            field.queryset = Tool.objects.select_related("team").order_by("team__slug", "name")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        team, tool = data.get("team"), data.get("tool")
        if team is not None and tool is not None and tool.team_id != team.pk:
            self.add_error("tool", f"{tool.name} is not a tool of team {team.slug}.")
        return data


@admin.register(ErrorCode)
class ErrorCodeAdmin(admin.ModelAdmin):
    form = ErrorCodeAdminForm
    list_display = ["code", "team", "scope", "category", "retry_class", "next_action", "side_effect"]
    list_filter = ["team", "category", "retry_class", "next_action", "side_effect"]
    list_select_related = ["team", "tool"]
    search_fields = ["code", "tool__name", "description", "hint"]
    ordering = ["team__slug", "code", "tool__name"]

    @admin.display(description="For", ordering="tool__name")
    def scope(self, entry: ErrorCode) -> str:
        return entry.tool.name if entry.tool is not None else "team-wide"
