"""DRF's content negotiation, short-cut for what agents send.

The agent API renders JSON only. DRF's default negotiation parses the Accept header on every
call to pick among the renderers; for a call that accepts anything (`*/*`, no header) or JSON,
the answer is always the first renderer, so it is given without parsing. Any other Accept is
negotiated as before (406 when nothing matches).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request

_ANY = frozenset({"", "*/*", "application/json"})


class JsonFirstNegotiation(DefaultContentNegotiation):
    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> Any:
        renderers = list(renderers)
        if not format_suffix and request.META.get("HTTP_ACCEPT", "").strip() in _ANY and renderers:
            renderer = renderers[0]
            if renderer.media_type == "application/json":
                return renderer, renderer.media_type
        return super().select_renderer(request, renderers, format_suffix)
