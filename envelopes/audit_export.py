"""The audit export (contract §13): a team's links and seals as JSON lines anyone can verify
offline (the SDK's `holdpoint audit verify`; the format is in the README, "Audit export").

    {"type": "header", "format": "holdpoint-audit/1", "team": {"id", "slug"}, "iss", "since", "until", ...}
    {"type": "link", "cursor", "id", "hash", "prev_hash", "fields": {...}}   every link: the tools' chains,
                                                                            then the steps', each in seq order
    {"type": "seal", "cursor", "hash", "prev_hash", "fields": {...}}         then every seal, in seq order

`fields` are exactly what the hash covers (audit._event_fields, audit._seal_fields): a link's
hash is sha256(prev_hash + "|" + canonical(fields)). A decision's link carries its receipt in
`data`. Memory stays flat however long the log: links and seals are read a page at a time in key
order (keyset on (team, step, seq) and (team, seq): no server-side cursor, so it works behind
PgBouncer), and each line is written as it is read. `cursor` is where to resume: a request with
`cursor=<the last line's cursor>` (and the same window) answers the lines after it, without
the header.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Q

from accounts.models import Team

from .audit import _event_fields, _seal_fields
from .models import AuditEvent, AuditSeal
from .rfc3339 import rfc3339

FORMAT = "holdpoint-audit/1"
PAGE = 2000
SEAL_PAGE = 200  # a seal may record thousands of heads
# t<tool id>.<seq> after a tool chain's link, p<step id>.<seq> after a step's, s<seq> after a seal.
CURSOR_RE = re.compile(r"\A(?P<kind>[tps])(?P<at>[0-9]{1,19}(?:\.[0-9]{1,10})?)\Z")


class CursorInvalid(ValueError):
    pass


def _line(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"


def parse_cursor(cursor: str | None) -> tuple[str, str] | None:
    if not cursor:
        return None
    match = CURSOR_RE.match(cursor)
    if match is None or (match["kind"] == "s") == ("." in match["at"]):
        raise CursorInvalid("cursor: the `cursor` of an exported line (t<id>.<seq>, p<id>.<seq> or s<seq>)")
    return match["kind"], match["at"]


def _link_line(event: AuditEvent, cursor: str) -> bytes:
    return _line(
        {
            "type": "link",
            "cursor": cursor,
            "id": event.pk,
            "hash": event.hash,
            "prev_hash": event.prev_hash,
            "fields": _event_fields(event),
        }
    )


def _links(team: Team, window: dict[str, datetime], after: tuple[str, str] | None) -> Iterator[bytes]:
    """The tools' chains, then the steps', each in seq order: keyset pages on (holder, seq)
    through audit_team_step_seq_idx. (Ids are no order: the links of one write are inserted by
    one statement, whose parts PostgreSQL runs in no set order.)"""
    kind, holder, seq = "t", 0, 0
    if after is not None:
        kind = after[0]
        holder, seq = (int(part) for part in after[1].split("."))
    links = AuditEvent.objects.filter(team=team, **window)
    for chains, column, prefix in (
        (links.filter(step__isnull=True), "tool_id", "t"),
        (links.filter(step__isnull=False), "step_id", "p"),
    ):
        if kind == "p" and prefix == "t":
            continue  # resumed among the steps' chains
        if prefix != kind:
            holder, seq = 0, 0
        ordered = chains.order_by(column, "seq")
        while True:
            page = list(
                ordered.filter(**{f"{column}__gte": holder}).filter(
                    Q(**{f"{column}__gt": holder}) | Q(seq__gt=seq)
                )[:PAGE]
            )
            for event in page:
                yield _link_line(event, f"{prefix}{getattr(event, column)}.{event.seq}")
            if len(page) < PAGE:
                break
            holder, seq = getattr(page[-1], column), page[-1].seq


def audit_export(
    *,
    team: Team,
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: str | None = None,
) -> Iterator[bytes]:
    """The team's export, one line at a time (a cursor is checked before the first line). The
    same window gives the same bytes, whichever door asks: the header says nothing of when."""
    after = parse_cursor(cursor)
    return _lines(team=team, since=since, until=until, after=after)


def _lines(
    *, team: Team, since: datetime | None, until: datetime | None, after: tuple[str, str] | None
) -> Iterator[bytes]:
    if after is None:
        yield _line(
            {
                "type": "header",
                "format": FORMAT,
                "team": {"id": team.pk, "slug": team.slug},
                "iss": settings.HOLDPOINT_BASE_URL.rstrip("/"),
                "since": rfc3339(since),
                "until": rfc3339(until),
                "jwks": f"{settings.HOLDPOINT_BASE_URL.rstrip('/')}/.well-known/holdpoint/jwks.json",
            }
        )
    window: dict[str, datetime] = {}
    if since is not None:
        window["created_at__gte"] = since
    if until is not None:
        window["created_at__lt"] = until
    if after is None or after[0] != "s":
        yield from _links(team, window, after)
    last_seq = int(after[1]) if after and after[0] == "s" else 0
    while True:
        # auditseal_unique_link: (team, seq).
        seals = list(AuditSeal.objects.filter(team=team, seq__gt=last_seq, **window).order_by("seq")[:SEAL_PAGE])
        for seal in seals:
            yield _line(
                {
                    "type": "seal",
                    "cursor": f"s{seal.seq}",
                    "hash": seal.hash,
                    "prev_hash": seal.prev_hash,
                    "fields": _seal_fields(seal),
                }
            )
        if len(seals) < SEAL_PAGE:
            return
        last_seq = seals[-1].seq
