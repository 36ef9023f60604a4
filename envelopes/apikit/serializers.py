"""Strict serializers: what the APIs accept, refused field by field as problem+json 422."""

from __future__ import annotations

import re
from typing import Any

from rest_framework import exceptions, serializers


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know (DRF ignores them by default)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {name: [serializers.ErrorDetail("Unknown field.", code="additionalProperties")] for name in unknown}
                )
        return super().to_internal_value(data)


class WholeRegexField(serializers.RegexField):
    """The pattern must match the whole value as sent: RegexField searches (Python's `$` also
    matches before a final newline) and trims, so "send_email\\n" would pass as a tool name."""

    def __init__(self, regex: str, **kwargs: Any) -> None:
        super().__init__(regex, trim_whitespace=False, **kwargs)
        self._whole = re.compile(regex)

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        if self._whole.fullmatch(value) is None:
            self.fail("invalid")
        return value


class PrintableCharField(serializers.CharField):
    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        if not value.isprintable():
            raise serializers.ValidationError("Control characters are not allowed.", code="pattern")
        return value


def validated(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    """The serializer's validated data; a 422 naming each field, or `body` for a non-object."""
    if not isinstance(data, dict):
        raise exceptions.ValidationError(
            {"non_field_errors": [serializers.ErrorDetail("Expected a JSON object.", code="type")]}
        )
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data  # type: ignore[return-value]
