"""API keys: `Authorization: Bearer hp_...`, one team per key, throttled per key.

A key is one indexed read of PostgreSQL, a round trip on every call an agent makes (0.3 ms of
its wait at one connection, issue 14). With the Redis cache each web process remembers the
active keys it has read, for at most KNOWN_FOR_S, under the shared token `api-keys`
(limits.throttle), and checks each against that token in the round trip that counts the call
in the key's throttle window: one Redis script instead of a Redis script and a SQL read.
Whatever revokes a key or changes a key or team renews the token once it commits, so the next
call with a revoked key reads PostgreSQL again and answers 401, whichever process it reaches.
Were Redis out of reach at that moment, a process could go on accepting the key it remembers
for at most KNOWN_FOR_S; while Redis is out of reach, nothing remembered is used. Without the
Redis cache every call reads the key, counted in its throttle window by the same statement.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import connection, models, transaction
from django.db.models.base import ModelState
from rest_framework import authentication, exceptions, permissions, throttling
from rest_framework.request import Request
from rest_framework.settings import api_settings

from envelopes import modelsql
from limits.throttle import row_and_window_hit_sql, token_read, token_renew, window_hit, window_hit_and_token

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
        key_hash = ApiKey.hash_key(raw.strip())
        key = _known_key(request, key_hash) or _read_key(request, key_hash)
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


def _key_row(key_hash: str) -> tuple[Any, ...] | None:
    """The active (unrevoked) key of that hash with its team's columns: one indexed read
    (key_hash is unique), the rows `ApiKey.objects.active().select_related("team")` would give."""
    sql, _, _ = _key_sql()
    return modelsql.fetchone_bound(sql, [key_hash])  # a prepared statement on PostgreSQL


@functools.cache
def _key_counted_sql() -> str | None:
    """`_key_sql`'s read, its first column the key's throttle window (`api_key:<pk>`), and the
    call counted in that window: one statement (None where the database cannot)."""
    sql, _, _ = _key_sql()
    window = f"CAST(%s AS text) || CAST(k.{connection.ops.quote_name(ApiKey._meta.pk.attname)} AS text)"
    return row_and_window_hit_sql(sql.replace("SELECT ", f"SELECT {window}, ", 1))


def _key_row_counted(request: Request, key_hash: str) -> tuple[Any, ...] | None:
    """`_key_row`, and the call counted in the key's window in the same round trip where the
    database can: the throttle then uses that count, as it does count_first's."""
    sql = _key_counted_sql()
    if sql is None:
        return _key_row(key_hash)
    _, length_s = ApiKeyRateThrottle._rate()
    now = time.time()
    bucket = int(now // length_s)
    row = modelsql.fetchone_bound(sql, [f"{ApiKeyRateThrottle.scope}:", key_hash, bucket])
    if row is None:
        return None
    request._holdpoint_counted = _Counted(row[0], length_s, now, bucket, int(row[-1]))  # type: ignore[attr-defined]
    return row[1:-1]


def _key_of(row: tuple[Any, ...]) -> ApiKey:
    """A new ApiKey and Team from the row (each request its own instances)."""
    _, key_fields, team_fields = _key_sql()
    key = ApiKey.from_db(connection.alias, key_fields, row[: len(key_fields)])
    key.team = Team.from_db(connection.alias, team_fields, row[len(key_fields) :])
    return key


_M = TypeVar("_M", bound=models.Model)


def _copy_of_key(key: ApiKey) -> ApiKey:
    """New instances of a remembered key and its team, for one request (so that no request
    sees what another did to its own): an eighth of from_db's CPU, which runs Model.__init__."""
    copy = _copy_of(key)
    copy._state.fields_cache["team"] = _copy_of(key.team)
    return copy


def _copy_of(instance: _M) -> _M:
    """A loaded instance's fields in a new instance, with its own state (as Model.__getstate__
    gives a pickled copy, without pickling's detour)."""
    copy = object.__new__(type(instance))
    copy.__dict__.update(instance.__dict__)
    state = copy._state = ModelState()
    state.db, state.adding = instance._state.db, False
    return copy


# --- the keys a process remembers (see the module's docstring) ------------------------------

KEYS_TOKEN = "api-keys"
KNOWN_FOR_S = 10.0
KNOWN_AT_MOST = 1024  # keys per process; more, and it starts again from none
_clock = time.monotonic


@dataclass(frozen=True)
class _Known:
    key: ApiKey  # as read, with its team; never handed out (each request gets _copy_of_key)
    token: int  # the shared token read before the row was
    since: float  # _clock() when it was read


_known: dict[str, _Known] = {}


def _known_key(request: Request, key_hash: str) -> ApiKey | None:
    """The remembered key of that hash, if the shared token is still the one it was read under
    (checked as the call is counted in the key's window: ApiKeyRateThrottle.count_first)."""
    known = _known.get(key_hash)
    if known is None:
        return None
    if _clock() - known.since >= KNOWN_FOR_S:
        _known.pop(key_hash, None)
        return None
    key = _copy_of_key(known.key)
    if ApiKeyRateThrottle.count_first(request, key) != known.token:
        _known.pop(key_hash, None)
        return None
    return key


def _read_key(request: Request, key_hash: str) -> ApiKey | None:
    """The key read from PostgreSQL, and remembered when the shared token could be read first
    (read after the row, a renewal between the two would go unseen). Without the token (Redis
    down or absent) the call is counted in the key's window by the same statement."""
    token = token_read(KEYS_TOKEN)
    row = _key_row(key_hash) if token is not None else _key_row_counted(request, key_hash)
    if row is None:
        return None
    key = _key_of(row)
    if token is not None:
        if len(_known) >= KNOWN_AT_MOST:
            _known.clear()
        _known[key_hash] = _Known(_copy_of_key(key), token, _clock())
    return key


def key_or_team_saved(*, created: bool = False, **kwargs: Any) -> None:
    """post_save and post_delete of ApiKey and Team (AccountsConfig.ready): a new row changes
    nothing remembered; any other change does."""
    if not created:
        api_keys_changed()


def api_keys_changed() -> None:
    """A key was revoked, or a key or team changed: renew the shared token now, and again once
    the transaction commits. The second renewal is the one that counts: a process that read the
    key between the two read it as it was before the commit, under the first one's token. The
    first serves a transaction that never commits here (a test's)."""
    token_renew(KEYS_TOKEN)
    transaction.on_commit(lambda: token_renew(KEYS_TOKEN))


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
        return self._key_subject(request.auth) if isinstance(request.auth, ApiKey) else None

    @classmethod
    def _key_subject(cls, key: ApiKey) -> str:
        return f"{cls.scope}:{key.pk}"

    @classmethod
    def _rate(cls) -> tuple[int, int]:
        """(the limit, the window's length in seconds)."""
        return parse_rate(cls.rate or api_settings.DEFAULT_THROTTLE_RATES[cls.scope])

    @classmethod
    def count_first(cls, request: Request, key: ApiKey) -> int | None:
        """Count the call in `key`'s window before the key is authenticated, and read the keys'
        shared token in the same round trip (accounts.auth's remembered keys); the token, or
        None when nothing could be counted. `allow_request` then uses this count."""
        _, length_s = cls._rate()
        now = time.time()
        bucket = int(now // length_s)
        subject = cls._key_subject(key)
        answer = window_hit_and_token(subject, bucket, length_s, KEYS_TOKEN)
        if answer is None:
            return None
        hits, token = answer
        request._holdpoint_counted = _Counted(subject, length_s, now, bucket, hits)  # type: ignore[attr-defined]
        return token

    def allow_request(self, request: Request, view: Any) -> bool:
        subject = self.window_subject(request)
        if subject is None:
            return True
        limit, length_s = self._rate()
        counted: _Counted | None = getattr(request, "_holdpoint_counted", None)
        hits: int | None
        if counted is not None and (counted.subject, counted.length_s) == (subject, length_s):
            now, bucket, hits = counted.now, counted.bucket, counted.hits  # counted by count_first
        else:
            now = time.time()
            bucket = int(now // length_s)
            hits = window_hit(subject, bucket, length_s)
        if hits is None or hits <= limit:
            return True
        self._wait = (bucket + 1) * length_s - now
        return False

    def wait(self) -> float | None:
        return self._wait


@dataclass(frozen=True)
class _Counted:
    """A call counted in its window by `ApiKeyRateThrottle.count_first`."""

    subject: str
    length_s: int
    now: float
    bucket: int
    hits: int


@functools.lru_cache(maxsize=8)
def parse_rate(rate: str) -> tuple[int, int]:
    """'6000/min' -> (6000, 60): DRF's rate format (s, m, h, d; the rest of the word is ignored)."""
    count, _, period = rate.partition("/")
    return int(count), {"s": 1, "m": 60, "h": 3600, "d": 86400}[period[0]]
