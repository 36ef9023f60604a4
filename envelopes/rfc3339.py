"""RFC 3339 times on the wire: the one formatter and the one parser every app uses.

Pure Python. A time goes out as `isoformat()` with `Z` for UTC; a time comes in only with an
offset (`Z` or `+hh:mm`), and is answered in UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(value: datetime | None, *, timespec: str = "auto") -> str | None:
    """`value` as RFC 3339 (`…Z` when it is in UTC); None stays None."""
    if value is None:
        return None
    return value.isoformat(timespec=timespec).replace("+00:00", "Z")


def parse_rfc3339(value: str) -> datetime | None:
    """An RFC 3339 time with an offset, in UTC; None when the text is not one."""
    text = value.upper().replace("Z", "+00:00")
    if "." in text:  # Python keeps microseconds; RFC 3339 allows any precision.
        head, _, tail = text.partition(".")
        digits = len(tail) - len(tail.lstrip("0123456789"))
        text = f"{head}.{tail[: min(digits, 6)]}{tail[digits:]}"
    try:
        parsed = datetime.fromisoformat(text)
        return parsed.astimezone(UTC) if parsed.tzinfo is not None else None
    except (ValueError, OverflowError):  # 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        return None
