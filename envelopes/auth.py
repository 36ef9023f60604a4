"""API keys: `Authorization: Bearer hp_...`, one team per key, throttled per key."""

from __future__ import annotations

import functools
import time
from typing import Any

from django.db import connection
from rest_framework import authentication, exceptions, permissions, throttling
from rest_framework.request import Request
from rest_framework.settings import api_settings

from limits.throttle import window_hit

from . import hot_sql
from .models import ApiKey, Team


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiKey] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != "bearer" or not raw.strip():
            raise exceptions.AuthenticationFailed("Use 'Authorization: Bearer hp_...'.")
        key = active_key(ApiKey.hash_key(raw.strip()))
        if key is None:
            raise exceptions.AuthenticationFailed("Unknown or revoked API key.")
        return (None, key)

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="holdpoint"'


@functools.cache
def _key_sql() -> tuple[str, list[str], list[str]]:
    """The lookup of an active key with its team, written once per process from the models'
    columns: compiling it through the ORM cost more CPU than PostgreSQL spends answering it."""
    key_fields = [f.attname for f in ApiKey._meta.concrete_fields]
    team_fields = [f.attname for f in Team._meta.concrete_fields]
    quote = connection.ops.quote_name
    key_table, team_table = quote(ApiKey._meta.db_table), quote(Team._meta.db_table)
    columns = [f"k.{quote(name)}" for name in key_fields] + [f"t.{quote(name)}" for name in team_fields]
    sql = (
        f"SELECT {', '.join(columns)} FROM {key_table} k JOIN {team_table} t ON t.id = k.team_id "  # noqa: S608 (names only)
        f"WHERE k.key_hash = %s AND k.revoked_at IS NULL"
    )
    return sql, key_fields, team_fields


def active_key(key_hash: str) -> ApiKey | None:
    """The active (unrevoked) key of that hash, with its team: one indexed read (key_hash is
    unique), the same rows `ApiKey.objects.active().select_related("team")` would give."""
    sql, key_fields, team_fields = _key_sql()
    row = hot_sql.fetchone_bound(sql, [key_hash])  # a prepared statement on PostgreSQL
    if row is None:
        return None
    key = ApiKey.from_db(connection.alias, key_fields, row[: len(key_fields)])
    key.team = Team.from_db(connection.alias, team_fields, row[len(key_fields) :])
    return key


class HasTeamKey(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        if not isinstance(request.auth, ApiKey):
            raise exceptions.NotAuthenticated("An API key is required: 'Authorization: Bearer hp_...'.")
        return True


class ApiKeyRateThrottle(throttling.BaseThrottle):
    """A fixed window per key, counted where every web process sees it (limits/throttle.py).

    One atomic increment per request: with the limit at N, N processes together admit at most
    N calls a window (DRF's SimpleRateThrottle read a list of timestamps and wrote it back, so
    each process could admit the whole budget). A window that cannot be counted (Redis down)
    lets the call through.
    """

    scope = "api_key"
    rate: str | None = None  # None: REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["api_key"]

    def __init__(self) -> None:
        self._wait: float | None = None

    def window_subject(self, request: Request) -> str | None:
        """Whose window this request counts in, or None when this throttle does not count it."""
        return f"{self.scope}:{request.auth.pk}" if isinstance(request.auth, ApiKey) else None

    def allow_request(self, request: Request, view: Any) -> bool:
        subject = self.window_subject(request)
        if subject is None:
            return True
        limit, length_s = parse_rate(self.rate or api_settings.DEFAULT_THROTTLE_RATES[self.scope])
        now = time.time()
        bucket = int(now // length_s)
        hits = window_hit(subject, bucket, length_s)
        if hits is None or hits <= limit:
            return True
        self._wait = (bucket + 1) * length_s - now
        return False

    def wait(self) -> float | None:
        return self._wait


@functools.lru_cache(maxsize=8)
def parse_rate(rate: str) -> tuple[int, int]:
    """'6000/min' -> (6000, 60): DRF's rate format (s, m, h, d; the rest of the word is ignored)."""
    count, _, period = rate.partition("/")
    return int(count), {"s": 1, "m": 60, "h": 3600, "d": 86400}[period[0]]
