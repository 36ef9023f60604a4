"""Odd input for every GET a user can make: the routes by URL name with the query parameters
their views read, and the strategies the fuzzers draw from (NUL and other controls, huge and
unicode text, crafted cursors, numbers and times out of range, repeated parameters, broken
percent-encoding).

ROUTES is what the fuzzers send; tests/test_every_query_parameter_fuzzed.py holds it to the
URLconf (every GET route is here) and to the code (every `request.GET` / `query_params` read is
listed), so a new route or parameter cannot go unfuzzed.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from hypothesis import strategies as st


@dataclass(frozen=True)
class Route:
    path: str  # "{name}" for each path segment the URL takes
    params: tuple[str, ...]  # the query parameters the view reads
    door: str  # agent (an hp_ key), reviewer (an hpr_ token), page (a signed-in member), anyone


AGENT_ROUTES = {
    "step-list": Route("/api/v1/steps", ("state", "tool", "run_id", "cursor", "limit"), "agent"),
    "step-detail": Route("/api/v1/steps/{ref}", (), "agent"),
    "tool-codes": Route("/api/v1/tools/{tool}/codes", (), "agent"),
    "tool-metrics": Route("/api/v1/tools/{tool}/metrics", ("since", "until"), "agent"),
    "run-skipped": Route("/api/v1/runs/{run_id}/skipped", (), "agent"),
}
REVIEWER_ROUTES = {
    "reviewers:queue": Route("/api/v1/teams/{team}/queue", ("kind", "for", "cursor", "limit"), "reviewer"),
    "reviewers:step": Route("/api/v1/teams/{team}/steps/{ref}", (), "reviewer"),
    "rules:api-rules": Route("/api/v1/teams/{team}/rules", (), "reviewer"),
    "rules:api-grants": Route("/api/v1/teams/{team}/grants", ("live", "cursor", "limit"), "reviewer"),
    "reviewers:audit-export": Route("/api/v1/teams/{team}/audit", ("since", "until", "cursor"), "reviewer"),
    "reviewers:away": Route("/api/v1/teams/{team}/away", (), "reviewer"),
}
PAGE_ROUTES = {
    "approvals:queues": Route(
        "/",
        ("team", "tool", "code", "age", "approvals_after", "verifications_after", "escalations_after", "waiting_after"),
        "page",
    ),
    "approvals:queue-counts": Route("/queue-counts", (), "page"),
    "approvals:search": Route("/search", ("q",), "page"),
    "approvals:step": Route("/steps/{pk}/", ("before", "v", "since", "older", "seen"), "page"),
    "approvals:tool-incident": Route("/tools/{tool}/incident/", ("team",), "page"),
    "approvals:quarantine": Route("/quarantine/", ("team", "tool", "code", "age", "page"), "page"),
    "approvals:quarantine-detail": Route("/quarantine/{pk}/", (), "page"),
    "approvals:api-keys": Route("/keys/", ("page",), "page"),
    "metrics-overview": Route("/overview/", (), "page"),
    "metrics-tool": Route("/tools/{tool}/", ("team", "window", "edit", "add"), "page"),
    "metrics-prometheus": Route("/metrics", (), "page"),
    "webhooks:dead-letters": Route("/webhooks/", (), "page"),
    "notifications:channels": Route("/notifications/", (), "page"),
    "notifications:account": Route("/account/", ("slack",), "page"),
    "reviewers:tokens": Route("/account/tokens/", ("page",), "page"),
    "rules:page": Route("/rules/", ("team",), "page"),
    "rules:edit": Route("/rules/edit", ("team", "rule"), "page"),
    "rules:version": Route("/rules/version", ("team", "version"), "page"),
    "rules:grants": Route("/rules/grants/", ("team",), "page"),
    "approvals:team-groups": Route("/teams/{team}/groups/", (), "page"),
}
# Read by the framework, not by our views: DRF's format suffix, drf-spectacular's language, the
# OpenID Connect client's parameters.
FRAMEWORK_ROUTES = {
    "schema": Route("/api/schema/", ("format", "lang"), "anyone"),
    "api-docs": Route("/api/docs/", (), "anyone"),
    "healthz": Route("/healthz", (), "anyone"),
    "jwks": Route("/.well-known/holdpoint/jwks.json", (), "anyone"),
    "readyz": Route("/readyz", (), "anyone"),
    "login": Route("/accounts/login/", ("next",), "anyone"),
    # Single sign-on's start and callback: mozilla-django-oidc's views read these.
    "oidc_authentication_init": Route("/oidc/authenticate/", ("next",), "anyone"),
    "oidc_authentication_callback": Route("/oidc/callback/", ("code", "state", "error"), "anyone"),
}
ROUTES = {**AGENT_ROUTES, **REVIEWER_ROUTES, **PAGE_ROUTES, **FRAMEWORK_ROUTES}
# DRF reads `format` on every API view (URL_FORMAT_OVERRIDE) before the view runs.
API_FRAMEWORK_PARAMS = ("format",)

# Routes that answer GET with 405 (they read only their POST body), and Django's own account
# pages other than the login form (password change and reset: not part of the product's doors).
POST_ONLY = frozenset(
    {
        "envelope-ingest",
        "attempt-request",
        "verification-report",
        "reviewers:decide",
        "metrics-code-save",
        "metrics-tool-settings",
        "webhooks:redeliver",
        "webhooks:endpoint-create",
        "webhooks:endpoint-rotate",
        "webhooks:endpoint-disable",
        "notifications:channel-create",
        "notifications:channel-test",
        "notifications:channel-disable",
        "notifications:channel-rotate",
        "notifications:slack-actions",
        "notifications:slack-link",
        "notifications:slack-unlink",
        "notifications:away",
        "reviewers:token-revoke",
        "rules:api-rules-test",
        "rules:api-grant",
        "rules:grant-revoke",
        "approvals:step-decide",
        "approvals:step-approve-similar",
        "approvals:grant-words",
        "approvals:tool-resume",
        "approvals:tool-cancel-held",
        "approvals:api-key-revoke",
        "logout",
    }
)
DJANGO_ACCOUNT_PAGES = frozenset(
    {
        "password_change",
        "password_change_done",
        "password_reset",
        "password_reset_done",
        "password_reset_confirm",
        "password_reset_complete",
    }
)

# --- values -------------------------------------------------------------------------------------


def cursor_of(querystring: str) -> str:
    """A cursor as DRF writes one: base64 of a query string (p: position, o: offset, r: reverse)."""
    return base64.b64encode(querystring.encode("utf-8", "surrogatepass")).decode("ascii")


# Cursors this API never wrote (bad base64, offsets out of range, positions that are no time):
# each one is refused with a 422 naming `cursor`.
CRAFTED_CURSORS = [
    "cD1ub3RhZGF0ZQ==",  # p=notadate, from the security review
    cursor_of("p=notadate"),
    cursor_of("p=2026-02-30 12:00:00+00:00"),
    cursor_of("p=9999-12-31 23:59:59-23:59"),
    cursor_of("p=0001-01-01 00:00:00+23:59"),
    cursor_of("p=2026-11-29 12:00:00"),  # naive
    cursor_of("p=2026-11-29"),
    cursor_of("p=a%00b"),
    cursor_of("p=\x00"),
    cursor_of("o=-1"),
    cursor_of("o=" + "9" * 5000),
    cursor_of("r=x"),
    cursor_of("r=-1&p=2026-11-29 12:00:00+00:00"),
    cursor_of("p=2026-11-29 12:00:00+00:00&p=x"),
    cursor_of("o=1&r=1&p=2026-11-29 12:00:00.123456+00:00"),
    cursor_of("\udcff"),
    "not base64!",
    "cD0",  # bad padding
    "\x00",
    "é",
]
# Cursors that decode to a first page (empty) or a capped offset: harmless, answered 200.
HARMLESS_CURSORS = ["====", cursor_of("o=99999999999999999999999")]
ODD_VALUES = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "\x00" * 3,
    "\x01\x08\x0b\x1b\x7f",
    "\t\r\n",
    "\u0085\u2028\u2029",
    "\u200b\u202e\ufeff",
    "\ufffd",
    "é",
    "e\u0301",
    "😀",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "ﷺ",
    "x" * 5000,
    "\x00" * 600,
    "0",
    "-1",
    "1",
    "2",
    "201",
    "-9223372036854775809",
    "9223372036854775808",
    "99999999999999999999999999999999",
    "1e309",
    "NaN",
    "-0",
    "0x10",
    "true",
    "null",
    "[]",
    "{}",
    "2026-02-30T12:00:00Z",
    "2026-11-29T23:59:60Z",
    "9999-12-31T23:59:59-23:59",
    "0001-01-01T00:00:00+23:59",
    "0000-01-01T00:00:00Z",
    "2026-11-29",
    "12:00",
    "2026-11-29T12:00:00Z",
    "..",
    "../../etc/passwd",
    "%00",
    "%",
    "'; DROP TABLE envelopes_step; --",
    "<script>alert(1)</script>",
    "{{ 7*7 }}",
    "1.2.step.3",
    "99999999999999999999.1.envelope.1",
    "1.9.nosuch.1",
    "awaiting_approval",
    "approvals",
    "acme",
    "charge_card",
    "24h",
    "7d",
    *CRAFTED_CURSORS,
    *HARMLESS_CURSORS,
]
# Percent-encodings no client should send: broken or overlong UTF-8, an encoded surrogate, a
# lone "%", NUL, and "+" for a space.
RAW_ESCAPES = ["%", "%zz", "%C3", "%C3%28", "%ED%A0%80", "%C0%80", "%FF%FE", "%00", "a%00b", "+", "%2B%2F", "%25"]


def odd_text() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(ODD_VALUES),
        st.text(max_size=40),
        st.integers(-(2**70), 2**70).map(str),
        st.builds(cursor_of, st.text(max_size=40)),
        st.builds(
            lambda p, o, r: cursor_of(urlencode({"p": p, "o": o, "r": r})),
            st.one_of(st.sampled_from(ODD_VALUES), st.text(max_size=30)),
            st.integers(-5, 2000),
            st.integers(-1, 3),
        ),
    )


def _encoded(value: str) -> str:
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


@st.composite
def odd_query(draw: st.DrawFn, params: tuple[str, ...]) -> str:
    """A raw query string over `params` (and a stranger or two): each one absent, once, or
    repeated (`?a=1&a=2`), its values odd text, some encoded as no client should."""
    names = list(params) + draw(st.lists(st.sampled_from(["x", "\x00", "", "a[]", "format"]), max_size=1))
    pairs: list[str] = []
    for name in names:
        for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2]))):
            raw = draw(st.integers(0, 9)) == 0
            value = draw(st.sampled_from(RAW_ESCAPES)) if raw else _encoded(draw(odd_text()))
            pairs.append(f"{_encoded(name)}={value}")
    if draw(st.integers(0, 19)) == 0:
        pairs.append(draw(st.sampled_from(["=", "&", "%", "==x", ";", "a;b=c"])))
    order = draw(st.permutations(pairs))
    return "&".join(order)


def odd_segment() -> st.SearchStrategy[str]:
    """A path segment: odd text percent-encoded (a NUL as %00, a slash as %2F), or a raw escape."""
    return st.one_of(
        odd_text().filter(bool).map(_encoded),
        st.sampled_from(RAW_ESCAPES),
    )


def url(route: Route, segments: dict[str, str], query: str) -> str:
    """The route's path with already-encoded segments, and the raw query."""
    return route.path.format(**segments) + (f"?{query}" if query else "")


# --- the sweep: each parameter and each path segment, alone, with each value that broke a view --

CRITICAL = [
    "a\x00b",
    "\x01\x1f\x7f",
    "😀\u202e\ufeff",
    "x" * 5000,
    "-1",
    "9" * 30,
    "9999-12-31T23:59:59-23:59",
    "cD1ub3RhZGF0ZQ==",
]
CRITICAL_RAW = ["%ED%A0%80", "%", "%00"]


def sweep(
    route: Route, segments: dict[str, str], extra_params: tuple[str, ...] = (), *, together: bool = False
) -> list[str]:
    """URLs that change one thing of a valid request (`segments` are valid, already encoded): a
    parameter set to each critical value (and each crafted cursor, for `cursor`) or sent twice,
    or a path segment set to each critical value. `together`: every parameter at once, for a
    view that reads each whatever the others hold (a form that ignores what does not parse)."""
    params = route.params + extra_params
    groups = [params] if together and params else [(param,) for param in params]
    urls = []
    for group in groups:
        values = CRITICAL + (CRAFTED_CURSORS if "cursor" in group else [])
        for value in [_encoded(value) for value in values] + CRITICAL_RAW + ["1&{name}=2"]:
            urls.append(url(route, segments, "&".join(f"{name}={value.format(name=name)}" for name in group)))
    for key in segments:
        urls += [url(route, {**segments, key: _encoded(value)}, "") for value in CRITICAL]
        urls += [url(route, {**segments, key: raw}, "") for raw in CRITICAL_RAW]
    return urls
