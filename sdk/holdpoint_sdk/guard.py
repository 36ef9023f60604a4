"""The guard: one tool call, wrapped so that Holdpoint decides what happens next.

    with hp.guard(tool="create_invoice", operation_ref=ref, input=payload) as guard:
        outcome = guard.call(provider.create_invoice, payload)
    if outcome.action == "verify": ...

A guard

1. fixes the `operation_ref` before the first write (pass the one you stored, or keep the
   generated `guard.operation_ref`, so that a retry of this operation uses it again);
2. fingerprints the input (SHA-256 of its RFC 8785 canonical JSON) and asks the attempt gate; a
   refusal is an outcome, not an exception, and the call is not made;
3. runs the call; whatever it raised, or an HTTP error response it returned, becomes an error
   envelope (see `holdpoint_sdk.envelopes`), anything else a success envelope;
4. posts the envelope (with an Idempotency-Key) and hands back an `Outcome` carrying
   Holdpoint's directive.

Leaving the `with` block with an exception after the gate granted the attempt, and before
an outcome was reported, reports that exception, so no granted attempt is left unexplained.
"""

from __future__ import annotations

import contextlib
import inspect
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx

from .envelopes import (
    DEFAULT_RETRY_DELAY,
    Failure,
    failure_for_exception,
    input_fingerprint,
    now_utc,
    parse_rfc3339,
    success_envelope,
)
from .errors import (
    AttemptRefused,
    HoldpointError,
    HoldpointUnavailable,
    ReportNotDelivered,
    ServerError,
    Throttled,
)

if TYPE_CHECKING:
    import datetime as dt

    from .client import AsyncHoldpoint, Holdpoint
    from .types import AttemptGrant, Directive, IngestAnswer, Step

_UNDELIVERED = (HoldpointUnavailable, ServerError, Throttled)


def new_operation_ref(prefix: str = "op") -> str:
    """A fresh operation_ref. Store it before the first write: a retry must reuse it."""
    return f"{prefix}_{uuid.uuid4().hex}"


@dataclass(frozen=True)
class Outcome:
    """What came of one guarded call, and what Holdpoint says to do next."""

    operation_ref: str
    step: Step | None  # None only for a refusal that created no step
    directive: Directive
    attempt: int | None = None  # the granted attempt's number (None when refused)
    result: Any = None  # what the call returned
    error: BaseException | None = None  # what the call raised (or its HTTP error, wrapped)
    failure: Failure | None = None  # the failure reported for it
    refusal: AttemptRefused | None = None  # the gate's refusal: the call was not made
    envelope: dict[str, Any] | None = None  # the envelope that was posted
    answer: IngestAnswer | None = None  # Holdpoint's answer to it

    @property
    def ok(self) -> bool:
        """The call ran and reported success (its write committed)."""
        return self.refusal is None and self.failure is None

    @property
    def refused(self) -> bool:
        return self.refusal is not None

    @property
    def action(self) -> str:
        return self.directive["action"]

    @property
    def may_write(self) -> bool:
        return self.directive["may_write"]

    @property
    def not_before(self) -> dt.datetime | None:
        return parse_rfc3339(self.directive.get("not_before"))

    @property
    def step_url(self) -> str | None:
        """The step's page on the dashboard, for a reviewer."""
        return self.step["url"] if self.step else None


def _as_http_error(result: Any) -> httpx.HTTPStatusError | None:
    """A returned HTTP error response counts as a raised one (httpx does not raise)."""
    if not isinstance(result, httpx.Response) or not result.is_error:
        return None
    try:
        request = result.request
    except RuntimeError:
        request = httpx.Request("POST", "http://tool.invalid/")
    return httpx.HTTPStatusError(f"HTTP {result.status_code}", request=request, response=result)


class _GuardBase:
    def __init__(
        self,
        *,
        tool: str,
        input: Any,
        operation_ref: str | None,
        run_id: str | None,
        correlation_id: str | None,
        side_effects: bool,
        verification_tool: str | None,
        classify: Callable[[BaseException], Failure | None] | None,
        default_retry_delay: float = DEFAULT_RETRY_DELAY,
    ) -> None:
        self.tool = tool
        self.input = input
        self.operation_ref = operation_ref or new_operation_ref()
        self.fingerprint = input_fingerprint(input)
        self.run_id = run_id
        self.correlation_id = correlation_id
        self.side_effects = side_effects
        self.verification_tool = verification_tool
        self.classify = classify
        self.default_retry_delay = default_retry_delay
        self.grant: AttemptGrant | None = None
        self.outcome: Outcome | None = None
        self._reporting = False
        # One key per request kind, kept for this guard's life: a lost answer is asked for
        # again and Holdpoint replays it instead of granting or recording twice.
        self.attempt_idempotency_key = "att_" + uuid.uuid4().hex
        self.envelope_idempotency_key = "env_" + uuid.uuid4().hex

    @property
    def attempt(self) -> int | None:
        return self.grant["attempt"] if self.grant else None

    def _refused(self, refusal: AttemptRefused) -> Outcome:
        self.outcome = Outcome(
            operation_ref=self.operation_ref,
            step=refusal.step,
            directive=refusal.directive,
            refusal=refusal,
        )
        return self.outcome

    def _failure(self, error: BaseException) -> Failure:
        failure = self.classify(error) if self.classify else None
        if failure is None:
            failure = failure_for_exception(
                error, side_effects=self.side_effects, default_delay=self.default_retry_delay
            )
        if (
            failure.next_action == "verify_operation"
            and self.verification_tool
            and "verification_tool" not in failure.safe_details
        ):
            details = {**failure.safe_details, "verification_tool": self.verification_tool}
            failure = replace(failure, safe_details=details)
        return failure

    def _error_envelope(self, failure: Failure) -> dict[str, Any]:
        assert self.grant is not None
        step = self.grant["step"]
        return failure.envelope(
            tool=self.tool,
            operation_ref=self.operation_ref,
            attempts_remaining=step["max_attempts"] - step["attempts"],
            occurred_at=now_utc(),
            attempt=self.attempt,
            run_id=self.run_id,
            correlation_id=self.correlation_id,
        )

    def _success_envelope(self, result: Any, evidence_ref: str | None) -> dict[str, Any]:
        return success_envelope(
            tool=self.tool,
            operation_ref=self.operation_ref,
            occurred_at=now_utc(),
            result=result,
            attempt=self.attempt,
            run_id=self.run_id,
            correlation_id=self.correlation_id,
            evidence_ref=evidence_ref,
        )

    def _check_unused(self) -> None:
        if self.outcome is not None or self._reporting:
            raise RuntimeError("a guard reports one call; use a new guard for the next attempt")

    def _start_report(self) -> None:
        if self.grant is None:
            raise RuntimeError("ask the attempt gate (begin or call) before reporting")
        self._check_unused()
        self._reporting = True

    def _reported(
        self,
        answer: IngestAnswer,
        envelope: dict[str, Any],
        *,
        result: Any = None,
        error: BaseException | None = None,
        failure: Failure | None = None,
    ) -> Outcome:
        self.outcome = Outcome(
            operation_ref=self.operation_ref,
            step=answer["step"],
            directive=answer["directive"],
            attempt=self.attempt,
            result=result,
            error=error,
            failure=failure,
            envelope=envelope,
            answer=answer,
        )
        return self.outcome

    def _undelivered(
        self,
        cause: HoldpointError,
        envelope: dict[str, Any],
        result: Any,
        error: BaseException | None,
    ) -> ReportNotDelivered:
        return ReportNotDelivered(
            cause,
            envelope=envelope,
            idempotency_key=self.envelope_idempotency_key,
            result=result,
            error=error,
        )

    def _should_report_on_exit(self, error: BaseException | None) -> bool:
        return (
            isinstance(error, Exception)
            and not isinstance(error, HoldpointError)
            and self.grant is not None
            and self.outcome is None
            and not self._reporting
        )


class Guard(_GuardBase):
    """A guard around one synchronous tool call (built by `Holdpoint.guard`)."""

    def __init__(self, client: Holdpoint, **options: Any) -> None:
        super().__init__(default_retry_delay=client.default_retry_delay, **options)
        self.client = client

    def begin(self) -> Outcome | None:
        """Ask the attempt gate. None when granted, the refusal Outcome when refused."""
        if self.grant is not None or self.outcome is not None:
            return self.outcome
        try:
            self.grant = self.client.request_attempt(
                self.operation_ref,
                tool=self.tool,
                input_fingerprint=self.fingerprint,
                run_id=self.run_id,
                correlation_id=self.correlation_id,
                idempotency_key=self.attempt_idempotency_key,
            )
        except AttemptRefused as refusal:
            return self._refused(refusal)
        return None

    def call(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Outcome:
        """Ask the gate, run `fn(*args, **kwargs)` if granted, report, return the Outcome."""
        self._check_unused()
        refused = self.begin()
        if refused is not None:
            return refused
        try:
            result = fn(*args, **kwargs)
        except Exception as error:
            return self.report_failure(error)
        http_error = _as_http_error(result)
        if http_error is not None:
            return self.report_failure(http_error, result=result)
        return self.report_success(result)

    def report_success(self, result: Any = None, *, evidence_ref: str | None = None) -> Outcome:
        """Report that the call committed (for calls not made through `call`)."""
        self._start_report()
        envelope = self._success_envelope(result, evidence_ref)
        try:
            answer = self.client.post_envelope(envelope, idempotency_key=self.envelope_idempotency_key)
        except _UNDELIVERED as cause:
            raise self._undelivered(cause, envelope, result, None) from cause
        return self._reported(answer, envelope, result=result)

    def report_failure(self, error: BaseException | Failure, *, result: Any = None) -> Outcome:
        """Report a failure: an exception (mapped) or an explicit `Failure`."""
        self._start_report()
        if isinstance(error, Failure):
            failure, raised = error, None
        else:
            failure, raised = self._failure(error), error
        envelope = self._error_envelope(failure)
        try:
            answer = self.client.post_envelope(envelope, idempotency_key=self.envelope_idempotency_key)
        except _UNDELIVERED as cause:
            raise self._undelivered(cause, envelope, result, raised) from cause
        return self._reported(answer, envelope, result=result, error=raised, failure=failure)

    def __enter__(self) -> Guard:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is not None and self._should_report_on_exit(exc):
            # If Holdpoint cannot be told, the original exception still propagates, and
            # Holdpoint treats the attempt as unreported (it may have written: verify).
            with contextlib.suppress(HoldpointError):
                self.report_failure(exc)


class AsyncGuard(_GuardBase):
    """A guard around one tool call, for asyncio (built by `AsyncHoldpoint.guard`). The
    wrapped function may be a coroutine function or a plain one."""

    def __init__(self, client: AsyncHoldpoint, **options: Any) -> None:
        super().__init__(default_retry_delay=client.default_retry_delay, **options)
        self.client = client

    async def begin(self) -> Outcome | None:
        if self.grant is not None or self.outcome is not None:
            return self.outcome
        try:
            self.grant = await self.client.request_attempt(
                self.operation_ref,
                tool=self.tool,
                input_fingerprint=self.fingerprint,
                run_id=self.run_id,
                correlation_id=self.correlation_id,
                idempotency_key=self.attempt_idempotency_key,
            )
        except AttemptRefused as refusal:
            return self._refused(refusal)
        return None

    async def call(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Outcome:
        self._check_unused()
        refused = await self.begin()
        if refused is not None:
            return refused
        try:
            result = fn(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
        except Exception as error:
            return await self.report_failure(error)
        http_error = _as_http_error(result)
        if http_error is not None:
            return await self.report_failure(http_error, result=result)
        return await self.report_success(result)

    async def report_success(self, result: Any = None, *, evidence_ref: str | None = None) -> Outcome:
        self._start_report()
        envelope = self._success_envelope(result, evidence_ref)
        try:
            answer = await self.client.post_envelope(envelope, idempotency_key=self.envelope_idempotency_key)
        except _UNDELIVERED as cause:
            raise self._undelivered(cause, envelope, result, None) from cause
        return self._reported(answer, envelope, result=result)

    async def report_failure(self, error: BaseException | Failure, *, result: Any = None) -> Outcome:
        self._start_report()
        if isinstance(error, Failure):
            failure, raised = error, None
        else:
            failure, raised = self._failure(error), error
        envelope = self._error_envelope(failure)
        try:
            answer = await self.client.post_envelope(envelope, idempotency_key=self.envelope_idempotency_key)
        except _UNDELIVERED as cause:
            raise self._undelivered(cause, envelope, result, raised) from cause
        return self._reported(answer, envelope, result=result, error=raised, failure=failure)

    async def __aenter__(self) -> AsyncGuard:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is not None and self._should_report_on_exit(exc):
            with contextlib.suppress(HoldpointError):
                await self.report_failure(exc)
