"""Cursor pages for the APIs' step lists: opaque cursors, and a 422 for one no API wrote."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions, serializers
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response

from envelopes.rfc3339 import parse_rfc3339


class StepCursor(CursorPagination):
    """Pages newest first. A cursor is opaque: one this API did not write (not base64, an offset
    out of range, a position that is no time) is a 422 naming `cursor`. DRF's own decoder answers
    404 for the first two and hands any position to the filter as text, which fails in the query."""

    page_size = 50
    max_page_size = 200
    page_size_query_param = "limit"
    ordering = ("-created_at", "-id")  # the position is the first field's: a time, for every subclass

    def decode_cursor(self, request: Request) -> Cursor | None:
        try:
            cursor = super().decode_cursor(request)
        except exceptions.NotFound:
            cursor = None
        else:
            if cursor is None or cursor.position is None:
                return cursor
            position = _cursor_time(str(cursor.position))
            if position is not None:
                # The position is the ordering field's text (DRF's stubs call it an int).
                return cursor._replace(position=position)  # type: ignore[arg-type]
        refused = serializers.ErrorDetail("Not a cursor this API wrote: follow `next` as given.", code="invalid")
        raise exceptions.ValidationError({"cursor": [refused]})

    def get_paginated_response(self, data: Any) -> Response:
        return Response({"results": data, "next": self.get_next_link()})


def _cursor_time(text: str) -> str | None:
    """The position as the filter's own text (an aware time within datetime's range), else None."""
    moment = parse_rfc3339(text)
    return moment.isoformat() if moment is not None else None
