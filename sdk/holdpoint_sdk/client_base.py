"""What the sync and async clients share: the calls they send (paths, bodies, headers, whether
a call is safe to repeat), how an answer becomes a value or an error, when to try again, the
edited approvals a client has read, and the calls a guard makes of either client. Neither
client imports the other, and the guard imports neither."""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from urllib.parse import parse_qsl, quote, urlsplit

import httpx

from . import __version__
from .background import ReportSuccess
from .envelopes import now_utc, parse_retry_after, parse_rfc3339, rfc3339
from .errors import AttemptRefused, HoldpointError, HoldpointUnavailable, error_from_problem
from .receipts import JWKS_PATH
from .types import AttemptGrant, IngestAnswer, Step, VerificationOutcome

Dialect = Literal["canonical", "compact", "mcp"]
CONTENT_TYPES: dict[str, str] = {
    "canonical": "application/json",
    "compact": 'application/json; profile="compact"',
    "mcp": 'application/json; profile="mcp"',
}
# Answers worth another try of a request that is safe to repeat.
RETRY_STATUSES = frozenset({502, 503, 504})
# A hold, a verification or a wait ends by someone else's act (or a timer): keep polling.
WAITING_ACTIONS = frozenset({"hold", "verify", "wait"})
MAX_RETRY_WAIT = 30.0  # seconds: a longer Retry-After is the caller's to honour, not ours
MAX_REMEMBERED_APPROVALS = 1024  # steps whose edited approval this client has read and not used


def step_path(operation_ref: str) -> str:
    """The API path of a step; the operation_ref is URL-encoded (`run_81%2Fstep_4`)."""
    return "/api/v1/steps/" + quote(operation_ref, safe="")


def _api_root(base_url: str) -> str:
    root = base_url.rstrip("/")
    return root[: -len("/api/v1")] if root.endswith("/api/v1") else root


def time_param(value: dt.datetime | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return rfc3339(value)


def drop_none(params: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in params.items() if value is not None}


def _body(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True)
class ConditionalStep:
    """A conditional read: `step` is None when it did not change since `etag` (304)."""

    step: Step | None
    etag: str | None

    @property
    def modified(self) -> bool:
        return self.step is not None


@dataclass(frozen=True)
class ApiCall:
    method: str
    path: str
    params: dict[str, Any] | None = None
    body: bytes | None = None
    headers: dict[str, str] | None = None
    idempotent: bool = True  # safe to send twice (a read, or a write with an Idempotency-Key)
    expect: tuple[int, ...] = (200, 201)


def poll_delay(step: Step, interval: float, *, now: dt.datetime) -> float:
    """How long to sleep before the next read: the backoff, or less if a wait ends sooner."""
    delay = interval * random.uniform(0.9, 1.1)
    directive = step["directive"]
    if directive["action"] == "wait":
        not_before = parse_rfc3339(directive.get("not_before"))
        if not_before is not None:
            until = (not_before - now).total_seconds()
            delay = min(delay, max(until, 0.0))
    return max(delay, 0.01)


def decided(step: Step, waiting_actions: frozenset[str], now: dt.datetime) -> bool:
    directive = step["directive"]
    if directive["action"] not in waiting_actions:
        return True
    if directive["action"] == "wait":
        # Past not_before the attempt gate grants, even before Holdpoint's timer sweep runs.
        not_before = parse_rfc3339(directive.get("not_before"))
        return not_before is not None and not_before <= now
    return False


class ClientBase:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 10.0,
        max_retries: int = 2,
        default_retry_delay: float = 30.0,
    ) -> None:
        if not api_key:
            raise ValueError("an API key (hp_...) is required")
        self.base_url = _api_root(base_url)
        self.timeout = timeout
        self.max_retries = max_retries
        self.default_retry_delay = default_retry_delay
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Accept": "application/json, application/problem+json",
            "User-Agent": f"holdpoint-sdk-python/{__version__}",
        }
        # operation_ref -> the input a reviewer approved with edits (contract v1.1), as last read
        # in a directive: the next guard on that step runs it instead of its own input.
        self._approved_inputs: dict[str, dict[str, Any]] = {}

    def approved_input(self, operation_ref: str) -> dict[str, Any] | None:
        """The edited input a reviewer approved for this step, as this client last read it in
        the step's directive (any read: `get_step`, `wait_for_decision`, an answer), until an
        attempt uses it; None otherwise. `guard` uses it on its own."""
        approved = self._approved_inputs.get(operation_ref)
        return dict(approved) if approved is not None else None

    def _remember(self, step: Any) -> None:
        """Keep the directive's approved input of a step just read (or forget it: a directive
        without one means none is pending)."""
        if not isinstance(step, Mapping) or not isinstance(step.get("operation_ref"), str):
            return
        ref = step["operation_ref"]
        directive = step.get("directive")
        approved = directive.get("input") if isinstance(directive, Mapping) else None
        self._approved_inputs.pop(ref, None)
        if isinstance(approved, Mapping):
            while len(self._approved_inputs) >= MAX_REMEMBERED_APPROVALS:
                self._approved_inputs.pop(next(iter(self._approved_inputs)))
            self._approved_inputs[ref] = dict(approved)

    def _remember_answer(self, answer: Any) -> Any:
        if isinstance(answer, Mapping):
            self._remember(answer.get("step"))
        return answer

    def _remember_refusal(self, refusal: AttemptRefused) -> None:
        self._remember(refusal.step)

    # --- building calls (shared by both clients) ---------------------------------------------

    def _envelope_call(self, envelope: Mapping[str, Any], idempotency_key: str | None, dialect: Dialect) -> ApiCall:
        headers = {"Content-Type": CONTENT_TYPES[dialect]}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        return ApiCall(
            "POST",
            "/api/v1/envelopes",
            body=_body(envelope),
            headers=headers,
            idempotent=bool(idempotency_key),
            expect=(201,),
        )

    def _attempt_call(
        self,
        operation_ref: str,
        tool: str,
        input_fingerprint: str,
        run_id: str | None,
        correlation_id: str | None,
        idempotency_key: str | None,
        input: Mapping[str, Any] | None = None,
    ) -> ApiCall:
        body = drop_none(
            {
                "tool": tool,
                "input_fingerprint": input_fingerprint,
                "input": input,
                "run_id": run_id,
                "correlation_id": correlation_id,
            }
        )
        headers = {"Content-Type": "application/json"}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        return ApiCall(
            "POST",
            step_path(operation_ref) + "/attempts",
            body=_body(body),
            headers=headers,
            idempotent=bool(idempotency_key),
            expect=(201,),
        )

    def _verification_call(
        self,
        operation_ref: str,
        outcome: VerificationOutcome,
        checked_at: dt.datetime | None,
        evidence_ref: str | None,
    ) -> ApiCall:
        body = drop_none(
            {
                "outcome": outcome,
                "checked_at": rfc3339(checked_at or now_utc()),
                "evidence_ref": evidence_ref,
            }
        )
        # A report is a fact about the world; repeating it changes nothing more.
        return ApiCall(
            "POST",
            step_path(operation_ref) + "/verification",
            body=_body(body),
            headers={"Content-Type": "application/json"},
        )

    def _jwks_call(self) -> ApiCall:
        return ApiCall("GET", JWKS_PATH, expect=(200,))

    def _step_call(self, operation_ref: str, etag: str | None) -> ApiCall:
        headers = {"If-None-Match": etag} if etag else None
        return ApiCall("GET", step_path(operation_ref), headers=headers, expect=(200, 304))

    def _list_call(self, params: dict[str, Any]) -> ApiCall:
        return ApiCall("GET", "/api/v1/steps", params=drop_none(params))

    @staticmethod
    def _next_params(next_url: str | None) -> dict[str, Any] | None:
        """The query of a `next` link, replayed on our own base URL: the key is never sent to
        whatever host the server happened to write into the link."""
        if not next_url:
            return None
        return dict(parse_qsl(urlsplit(next_url).query))

    # --- answers -----------------------------------------------------------------------------

    @staticmethod
    def _error(response: httpx.Response) -> HoldpointError:
        try:
            problem = response.json()
        except ValueError:
            problem = None
        retry_after = parse_retry_after(response.headers.get("Retry-After"), now=now_utc())
        return error_from_problem(
            response.status_code,
            problem if isinstance(problem, dict) else None,
            retry_after=retry_after,
            fallback_detail=f"HTTP {response.status_code} from Holdpoint",
        )

    def _retry_wait(self, call: ApiCall, try_number: int, response: httpx.Response | None) -> float | None:
        """Seconds to wait before sending `call` again, or None to stop trying."""
        if try_number >= self.max_retries:
            return None
        backoff = min(0.5 * 2.0**try_number, 8.0) * random.uniform(0.8, 1.2)
        if response is None:
            return backoff
        if not call.idempotent or response.status_code not in RETRY_STATUSES:
            return None
        asked = parse_retry_after(response.headers.get("Retry-After"), now=now_utc())
        if asked is not None and asked > MAX_RETRY_WAIT:
            return None
        return max(backoff, asked or 0.0)

    @staticmethod
    def _never_sent(error: httpx.TransportError) -> bool:
        return isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)

    @staticmethod
    def _unavailable(error: httpx.TransportError) -> HoldpointUnavailable:
        return HoldpointUnavailable(
            f"no answer from Holdpoint ({type(error).__name__})", code="unavailable", status=None
        )

    @staticmethod
    def _json(response: httpx.Response, call: ApiCall) -> Any:
        if response.status_code == 304:
            return None
        return response.json()


# What a guard needs of its client: the clients build guards, so a guard takes either one by
# these calls alone and imports neither client.
class GateClient(Protocol):
    """The synchronous client as a guard uses it (`Holdpoint`)."""

    default_retry_delay: float

    def request_attempt(
        self,
        operation_ref: str,
        *,
        tool: str,
        input_fingerprint: str,
        run_id: str | None = None,
        correlation_id: str | None = None,
        idempotency_key: str | None = None,
        input: Mapping[str, Any] | None = None,
    ) -> AttemptGrant: ...

    def post_envelope(self, envelope: Mapping[str, Any], *, idempotency_key: str | None = None) -> IngestAnswer: ...

    report_success: ReportSuccess

    def report_later(self, envelope: Mapping[str, Any], *, idempotency_key: str) -> None: ...

    def reports_settled(self, operation_ref: str) -> None: ...

    def check_approval_receipt(
        self, step: Mapping[str, Any], *, operation_ref: str, tool: str, fingerprint: str
    ) -> None: ...


class AsyncGateClient(Protocol):
    """The asyncio client as a guard uses it (`AsyncHoldpoint`)."""

    default_retry_delay: float

    async def request_attempt(
        self,
        operation_ref: str,
        *,
        tool: str,
        input_fingerprint: str,
        run_id: str | None = None,
        correlation_id: str | None = None,
        idempotency_key: str | None = None,
        input: Mapping[str, Any] | None = None,
    ) -> AttemptGrant: ...

    async def post_envelope(
        self, envelope: Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> IngestAnswer: ...

    report_success: ReportSuccess

    async def report_later(self, envelope: Mapping[str, Any], *, idempotency_key: str) -> None: ...

    async def reports_settled(self, operation_ref: str) -> None: ...

    async def check_approval_receipt(
        self, step: Mapping[str, Any], *, operation_ref: str, tool: str, fingerprint: str
    ) -> None: ...
