"""Sync and async clients for the Holdpoint API (contract v1, section 4)."""

from __future__ import annotations

import datetime as dt
import json
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast
from urllib.parse import parse_qsl, quote, urlsplit

import httpx

from . import __version__
from .envelopes import Failure, now_utc, parse_retry_after, parse_rfc3339, rfc3339
from .errors import AttemptRefused, DecisionTimeout, HoldpointError, HoldpointUnavailable, error_from_problem
from .guard import Guard, Outcome, takes_the_input
from .types import (
    AttemptGrant,
    CodeList,
    IngestAnswer,
    Metrics,
    Skipped,
    Step,
    StepAnswer,
    StepPage,
    VerificationOutcome,
)

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


def _time_param(value: dt.datetime | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return rfc3339(value)


def _drop_none(params: Mapping[str, Any]) -> dict[str, Any]:
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
class _Call:
    method: str
    path: str
    params: dict[str, Any] | None = None
    body: bytes | None = None
    headers: dict[str, str] | None = None
    idempotent: bool = True  # safe to send twice (a read, or a write with an Idempotency-Key)
    expect: tuple[int, ...] = (200, 201)


def _poll_delay(step: Step, interval: float, *, now: dt.datetime) -> float:
    """How long to sleep before the next read: the backoff, or less if a wait ends sooner."""
    delay = interval * random.uniform(0.9, 1.1)
    directive = step["directive"]
    if directive["action"] == "wait":
        not_before = parse_rfc3339(directive.get("not_before"))
        if not_before is not None:
            until = (not_before - now).total_seconds()
            delay = min(delay, max(until, 0.0))
    return max(delay, 0.01)


def _decided(step: Step, waiting_actions: frozenset[str], now: dt.datetime) -> bool:
    directive = step["directive"]
    if directive["action"] not in waiting_actions:
        return True
    if directive["action"] == "wait":
        # Past not_before the attempt gate grants, even before Holdpoint's timer sweep runs.
        not_before = parse_rfc3339(directive.get("not_before"))
        return not_before is not None and not_before <= now
    return False


class _ClientBase:
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

    def _envelope_call(self, envelope: Mapping[str, Any], idempotency_key: str | None, dialect: Dialect) -> _Call:
        headers = {"Content-Type": CONTENT_TYPES[dialect]}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        return _Call(
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
    ) -> _Call:
        body = _drop_none(
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
        return _Call(
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
    ) -> _Call:
        body = _drop_none(
            {
                "outcome": outcome,
                "checked_at": rfc3339(checked_at or now_utc()),
                "evidence_ref": evidence_ref,
            }
        )
        # A report is a fact about the world; repeating it changes nothing more.
        return _Call(
            "POST",
            step_path(operation_ref) + "/verification",
            body=_body(body),
            headers={"Content-Type": "application/json"},
        )

    def _step_call(self, operation_ref: str, etag: str | None) -> _Call:
        headers = {"If-None-Match": etag} if etag else None
        return _Call("GET", step_path(operation_ref), headers=headers, expect=(200, 304))

    def _list_call(self, params: dict[str, Any]) -> _Call:
        return _Call("GET", "/api/v1/steps", params=_drop_none(params))

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

    def _retry_wait(self, call: _Call, try_number: int, response: httpx.Response | None) -> float | None:
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
    def _json(response: httpx.Response, call: _Call) -> Any:
        if response.status_code == 304:
            return None
        return response.json()


class Holdpoint(_ClientBase):
    """The synchronous client.

    >>> hp = Holdpoint("https://holdpoint.example", api_key="hp_...")
    >>> outcome = hp.guarded_call(tool="create_invoice", operation_ref=ref, input=payload,
    ...                           call=lambda: provider.create_invoice(payload))
    >>> outcome.action  # "stop" when committed, "verify", "wait", "fix_input", "hold", ...
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 10.0,
        max_retries: int = 2,
        default_retry_delay: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            base_url,
            api_key,
            timeout=timeout,
            max_retries=max_retries,
            default_retry_delay=default_retry_delay,
        )
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=self._headers,
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
        )
        self._sleep = sleep
        self._clock = clock

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Holdpoint:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _send(self, call: _Call) -> httpx.Response:
        try_number = 0
        while True:
            try:
                response = self._http.request(
                    call.method,
                    call.path,
                    params=call.params,
                    content=call.body,
                    headers=call.headers,
                )
            except httpx.TransportError as error:
                wait = self._retry_wait(call, try_number, None)
                if wait is None or not (call.idempotent or self._never_sent(error)):
                    raise self._unavailable(error) from error
            else:
                if response.status_code in call.expect:
                    return response
                wait = self._retry_wait(call, try_number, response)
                if wait is None:
                    raise self._error(response)
            self._sleep(wait)
            try_number += 1

    def _fetch(self, call: _Call) -> Any:
        return self._json(self._send(call), call)

    # --- the API -----------------------------------------------------------------------------

    def post_envelope(
        self,
        envelope: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        dialect: Dialect = "canonical",
    ) -> IngestAnswer:
        """POST /envelopes: report one tool result. With an Idempotency-Key a lost answer can
        be asked for again without recording the result twice."""
        call = self._envelope_call(envelope, idempotency_key, dialect)
        return cast(IngestAnswer, self._remember_answer(self._fetch(call)))

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
    ) -> AttemptGrant:
        """The attempt gate: ask before every write. Raises AttemptRefused when refused.

        `input` (contract v1.1) is the tool call's input itself, for the reviewer to see; the
        server checks that it hashes to `input_fingerprint`. Leave it out for input that must
        not leave the agent (and for a server older than v1.1, which refuses the field)."""
        call = self._attempt_call(
            operation_ref, tool, input_fingerprint, run_id, correlation_id, idempotency_key, input
        )
        try:
            grant = self._fetch(call)
        except AttemptRefused as refusal:
            self._remember_refusal(refusal)
            raise
        self._approved_inputs.pop(operation_ref, None)  # a granted attempt used the approval
        return cast(AttemptGrant, self._remember_answer(grant))

    def report_verification(
        self,
        operation_ref: str,
        *,
        outcome: VerificationOutcome,
        checked_at: dt.datetime | None = None,
        evidence_ref: str | None = None,
    ) -> StepAnswer:
        """Report a lookup of the step's write by operation_ref."""
        call = self._verification_call(operation_ref, outcome, checked_at, evidence_ref)
        return cast(StepAnswer, self._remember_answer(self._fetch(call)))

    def get_step(self, operation_ref: str) -> Step:
        step = self.get_step_if_changed(operation_ref, etag=None).step
        assert step is not None
        return step

    def get_step_if_changed(self, operation_ref: str, *, etag: str | None) -> ConditionalStep:
        """GET /steps/{ref} with If-None-Match: a 304 costs the server almost nothing."""
        response = self._send(self._step_call(operation_ref, etag))
        new_etag = response.headers.get("ETag", etag)
        if response.status_code == 304:
            return ConditionalStep(step=None, etag=new_etag)
        step = cast(Step, response.json())
        self._remember(step)
        return ConditionalStep(step=step, etag=new_etag)

    def list_steps_page(
        self,
        *,
        state: str | None = None,
        tool: str | None = None,
        run_id: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> StepPage:
        params = {"state": state, "tool": tool, "run_id": run_id, "limit": limit, "cursor": cursor}
        return cast(StepPage, self._fetch(self._list_call(params)))

    def list_steps(
        self,
        *,
        state: str | None = None,
        tool: str | None = None,
        run_id: str | None = None,
        page_size: int | None = None,
    ) -> Iterator[Step]:
        """Every matching step, newest first, following the cursor from page to page."""
        params: dict[str, Any] | None = {
            "state": state,
            "tool": tool,
            "run_id": run_id,
            "limit": page_size,
        }
        while params is not None:
            page = cast(StepPage, self._fetch(self._list_call(params)))
            yield from page["results"]
            params = self._next_params(page["next"])

    def tool_codes(self, tool: str) -> CodeList:
        return cast(CodeList, self._fetch(_Call("GET", f"/api/v1/tools/{quote(tool, safe='')}/codes")))

    def tool_metrics(
        self,
        tool: str,
        *,
        since: dt.datetime | str | None = None,
        until: dt.datetime | str | None = None,
    ) -> Metrics:
        params = _drop_none({"since": _time_param(since), "until": _time_param(until)})
        call = _Call("GET", f"/api/v1/tools/{quote(tool, safe='')}/metrics", params=params)
        return cast(Metrics, self._fetch(call))

    def run_skipped(self, run_id: str) -> Skipped:
        path = f"/api/v1/runs/{quote(run_id, safe='')}/skipped"
        return cast(Skipped, self._fetch(_Call("GET", path)))

    # --- the agent's helpers -----------------------------------------------------------------

    def guard(
        self,
        *,
        tool: str,
        input: Any,
        operation_ref: str | None = None,
        run_id: str | None = None,
        correlation_id: str | None = None,
        side_effects: bool = True,
        verification_tool: str | None = None,
        classify: Callable[[BaseException], Failure | None] | None = None,
        send_input: bool = True,
    ) -> Guard:
        """A guard around one tool call (see `Guard`). Keep `guard.operation_ref`: a retry of
        the same operation must use it again.

        The input goes to the gate with its fingerprint, so a reviewer sees what they approve;
        `send_input=False` sends the fingerprint only (input that must not leave the agent).
        When this client has read an approval of the step with an edited input, `guard.input`
        is that input and the guard runs it (`guard.input_edited`)."""
        return Guard(
            self,
            tool=tool,
            input=input,
            operation_ref=operation_ref,
            run_id=run_id,
            correlation_id=correlation_id,
            side_effects=side_effects,
            verification_tool=verification_tool,
            classify=classify,
            send_input=send_input,
            approved_input=self.approved_input(operation_ref) if operation_ref else None,
        )

    def guarded_call(self, *, tool: str, input: Any, call: Callable[[], Any], **options: Any) -> Outcome:
        """Ask the gate, run `call()`, report what happened and return the Outcome. A `call`
        that takes one argument gets the input to run (the approved one after an approval with
        edits); a `call` that takes none cannot be given it and raises ApprovedInputNotPassed
        after an edited approval, before anything runs."""
        with self.guard(tool=tool, input=input, **options) as guard:
            return guard.call(call, guard.input) if takes_the_input(call) else guard.call(call)

    def wait_for_decision(
        self,
        operation_ref: str,
        *,
        timeout: float = 3600.0,
        initial_interval: float = 1.0,
        max_interval: float = 30.0,
        waiting_actions: frozenset[str] = WAITING_ACTIONS,
    ) -> Step:
        """Poll the step (ETag, exponential backoff with jitter) until its directive is no
        longer hold / verify / wait, and return it. A `wait` ends at its not_before.

        Raises DecisionTimeout after `timeout` seconds."""
        deadline = self._clock() + timeout
        etag: str | None = None
        step: Step | None = None
        interval = initial_interval
        while True:
            try:
                read = self.get_step_if_changed(operation_ref, etag=etag)
            except HoldpointError as error:
                if error.status != 429 and error.status is not None and error.status < 500:
                    raise
                read = ConditionalStep(step=None, etag=etag)
                interval = max(interval, error.retry_after or 0.0)
            if read.step is not None:
                if step is not None and read.step["directive"] != step["directive"]:
                    interval = initial_interval  # something moved: look again soon
                step, etag = read.step, read.etag
            if step is not None and _decided(step, waiting_actions, now_utc()):
                return step
            left = deadline - self._clock()
            if left <= 0:
                raise DecisionTimeout(f"no decision on {operation_ref!r} within {timeout}s", step=step)
            delay = _poll_delay(step, interval, now=now_utc()) if step else interval
            self._sleep(min(delay, left))
            interval = min(interval * 2, max_interval)

    def sleep_until(self, when: dt.datetime | str | None) -> None:
        """Sleep until a directive's not_before (no-op when it is None or past)."""
        moment = parse_rfc3339(when) if isinstance(when, str) else when
        if moment is not None:
            seconds = (moment - now_utc()).total_seconds()
            if seconds > 0:
                self._sleep(seconds)
