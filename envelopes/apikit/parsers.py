"""JSON bodies with a size limit and the envelope dialects' media types."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from rest_framework import exceptions, parsers

MAX_BODY_BYTES = 64 * 1024


class PayloadTooLarge(exceptions.APIException):
    status_code = 413
    default_detail = "The body is larger than 64 KiB."
    default_code = "payload_too_large"


def read_limited(stream: Any) -> bytes:
    if stream is None:
        return b""
    body = stream.read(MAX_BODY_BYTES + 1)
    if len(body) > MAX_BODY_BYTES:
        raise PayloadTooLarge()
    return body


class EnvelopeJSONParser(parsers.BaseParser):
    """application/json, with or without a `profile` parameter (the dialects).

    Returns the decoded JSON; the raw bytes stay on the request as `raw_body` for the
    quarantine of rejected envelopes.
    """

    media_type = "application/json"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        body = read_limited(stream)
        request = (parser_context or {}).get("request")
        if request is not None:
            request._raw_body = body
        return decode_json(body)


def decode_json(body: bytes, *, object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None) -> Any:
    """The body as JSON (UTF-8, no NaN or Infinity); a 400 `malformed_json` otherwise, also for a
    ValueError the hook raises."""
    try:
        return json.loads(body.decode("utf-8"), object_pairs_hook=object_pairs_hook, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as error:
        raise exceptions.ParseError(f"Malformed JSON: {error}") from error


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
