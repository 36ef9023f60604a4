"""The guard: one tool call, wrapped so that Holdpoint decides what happens next.

    with hp.guard(tool="create_invoice", operation_ref=ref, input=payload) as guard:
        outcome = guard.call(provider.create_invoice, payload)
    if outcome.action == "verify": ...

A guard

1. fixes the `operation_ref` before the first write (pass the one you stored, or keep the
   generated `guard.operation_ref`, so that a retry of this operation uses it again);
2. fingerprints the input (SHA-256 of its RFC 8785 canonical JSON) and asks the attempt gate,
   sending the input itself too (contract v1.1: the reviewer sees what they approve) unless
   `send_input=False`; a refusal is an outcome, not an exception, and the call is not made;
   after a reviewer approved an edited input, the approved input is the one fingerprinted,
   sent and run (`guard.input`, `outcome.input_edited`);
3. runs the call; whatever it raised, or an HTTP error response it returned, becomes an error
   envelope (see `holdpoint_sdk.envelopes`), anything else a success envelope;
4. posts the envelope (with an Idempotency-Key) and hands back an `Outcome` carrying
   Holdpoint's directive; with `report_success="after"` a success's envelope is queued and
   posted in the background instead (its directive is always `stop`: see
   `holdpoint_sdk.background`), while a failure is still reported before the call returns.

Leaving the `with` block with an exception after the gate granted the attempt, and before
an outcome was reported, reports that exception, so no granted attempt is left unexplained.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx

from .background import SUCCESS_DIRECTIVE, ReportSuccess, check_mode
from .client_base import AsyncGateClient, GateClient
from .envelopes import (
    DEFAULT_RETRY_DELAY,
    MAX_INPUT_BYTES,
    Failure,
    canonical_json,
    failure_for_exception,
    jsonable,
    now_utc,
    parse_rfc3339,
    success_envelope,
)
from .errors import (
    ApprovedInputNotPassed,
    AttemptRefused,
    HoldpointError,
    HoldpointUnavailable,
    ReportNotDelivered,
    ServerError,
    Throttled,
    ValidationFailed,
    input_rules,
    names_input,
)

if TYPE_CHECKING:
    import datetime as dt

    from .types import AttemptGrant, Directive, IngestAnswer, Step

_UNDELIVERED = (HoldpointUnavailable, ServerError, Throttled)
logger = logging.getLogger("holdpoint_sdk")


def takes_the_input(fn: Callable[..., Any]) -> bool:
    """Whether `fn` needs exactly one positional argument (the input to run), as
    `provider.refund` does and `lambda: provider.refund(x)` does not."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    try:
        signature.bind()
    except TypeError:
        try:
            signature.bind(None)
        except TypeError:
            return False
        return True
    return False


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
    input: Any = None  # the input the gate was asked about (and the call ran, when granted)
    input_edited: bool = False  # a reviewer approved an edited input: `input` is theirs
    input_sent: bool = False  # the gate received `input` itself, not only its fingerprint
    # report_success="after": the success's envelope is queued, posted after this returned;
    # `answer` is None and `directive` is a success's (`stop`).
    report_pending: bool = False

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
        send_input: bool = True,
        approved_input: Mapping[str, Any] | None = None,
        default_retry_delay: float = DEFAULT_RETRY_DELAY,
        report_success: ReportSuccess = "before",
    ) -> None:
        self.tool = tool
        self.report_mode = check_mode(report_success)
        self.original_input = input
        self.operation_ref = operation_ref or new_operation_ref()
        # Canonicalised once: the fingerprint and the size check of the input sent both use it.
        canonical = canonical_json(input)
        # After an approval with an edited input, the gate grants only the reviewer's input:
        # that is the one fingerprinted, sent and run.
        approved = canonical_json(approved_input) if approved_input is not None else None
        edited = approved is not None and approved != canonical
        if edited and approved_input is not None and approved is not None:
            self.input: Any = dict(approved_input)
            canonical = approved
        else:
            self.input = input
        self.input_edited = edited
        self.fingerprint = hashlib.sha256(canonical).hexdigest()
        self._canonical_size = len(canonical)
        self.send_input = send_input
        self.input_sent = False
        self.input_withheld: str | None = None  # why the input was not sent, when it was not
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
            **self._input_fields(),
        )
        return self.outcome

    def _receipt_names(self) -> dict[str, str]:
        """What an approval's receipt must name for this call (contract §13)."""
        return {"operation_ref": self.operation_ref, "tool": self.tool, "fingerprint": self.fingerprint}

    def _input_fields(self) -> dict[str, Any]:
        return {"input": self.input, "input_edited": self.input_edited, "input_sent": self.input_sent}

    def _input_for_gate(self) -> dict[str, Any] | None:
        """The input as the gate takes it (a JSON object within 32 KiB canonical), or None with
        `input_withheld` saying why it stays here."""
        if not self.send_input:
            self.input_withheld = "send_input=False"
            return None
        value = jsonable(self.input)
        if not isinstance(value, dict):
            self.input_withheld = "not a JSON object"
            return None
        size = self._canonical_size
        if size > MAX_INPUT_BYTES:
            self.input_withheld = f"its canonical form is {size} bytes, over the {MAX_INPUT_BYTES} the gate takes"
            logger.warning(
                "holdpoint: not sending the input of %s on %s (%s); the reviewer sees only its fingerprint",
                self.tool, self.operation_ref, self.input_withheld,
            )  # fmt: skip
            return None
        return value

    def _input_refused(self, error: ValidationFailed) -> None:
        """The gate refused the input itself (422): ask again with the fingerprint alone, under a
        new Idempotency-Key (the refusal is stored under the old one), so that the binding
        still holds and the write is still gated; the reviewer sees no input."""
        self.input_withheld = f"Holdpoint refused it ({input_rules(error)})"
        logger.warning(
            "holdpoint: the attempt gate refused the input of %s on %s (%s); asking again with its fingerprint only",
            self.tool, self.operation_ref, input_rules(error),
        )  # fmt: skip
        self.attempt_idempotency_key = "att_" + uuid.uuid4().hex

    def _call_arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call's arguments with the approved input in place of the original one.

        Checked before the gate is asked: a call that would not receive the approved input is
        never granted (running the original would write what no reviewer approved)."""
        if not self.input_edited:
            return args, kwargs

        def is_original(value: Any) -> bool:
            original = self.original_input
            return value is original or (isinstance(value, Mapping) and value == original)

        def is_approved(value: Any) -> bool:
            return value is self.input

        passed = [*args, *kwargs.values()]
        if not any(is_original(value) or is_approved(value) for value in passed):
            raise ApprovedInputNotPassed(
                f"a reviewer approved an edited input for {self.operation_ref!r}: pass it to the call "
                "(guard.call(fn, guard.input)); the original input would not be granted"
            )
        new_args = tuple(self.input if is_original(value) else value for value in args)
        new_kwargs = {key: self.input if is_original(value) else value for key, value in kwargs.items()}
        return new_args, new_kwargs

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
            **self._input_fields(),
        )
        return self.outcome

    def _reported_later(self, envelope: dict[str, Any], result: Any) -> Outcome:
        assert self.grant is not None
        self.outcome = Outcome(
            operation_ref=self.operation_ref,
            step=self.grant["step"],
            directive=dict(SUCCESS_DIRECTIVE),  # type: ignore[arg-type]
            attempt=self.attempt,
            result=result,
            envelope=envelope,
            report_pending=True,
            **self._input_fields(),
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

    def __init__(self, client: GateClient, **options: Any) -> None:
        mode = options.pop("report_success", None) or client.report_success
        super().__init__(default_retry_delay=client.default_retry_delay, report_success=mode, **options)
        self.client = client

    def begin(self) -> Outcome | None:
        """Ask the attempt gate. None when granted, the refusal Outcome when refused."""
        if self.grant is not None or self.outcome is not None:
            return self.outcome
        sent = self._input_for_gate()
        try:
            try:
                self.grant = self._ask(sent)
            except ValidationFailed as error:
                if sent is None or not names_input(error):
                    raise
                self._input_refused(error)
                sent = None
                self.grant = self._ask(None)
        except AttemptRefused as refusal:
            return self._refused(refusal)
        # An approved input runs only under a receipt that verifies (ReceiptInvalid: not run).
        self.client.check_approval_receipt(self.grant["step"], **self._receipt_names())
        return None

    def _ask(self, sent: dict[str, Any] | None) -> AttemptGrant:
        self.input_sent = sent is not None
        self.client.reports_settled(self.operation_ref)  # its queued success report lands first
        return self.client.request_attempt(
            self.operation_ref,
            tool=self.tool,
            input_fingerprint=self.fingerprint,
            input=sent,
            run_id=self.run_id,
            correlation_id=self.correlation_id,
            idempotency_key=self.attempt_idempotency_key,
        )

    def call(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Outcome:
        """Ask the gate, run `fn(*args, **kwargs)` if granted, report, return the Outcome.

        After an approval with an edited input, an argument that is the guard's original input
        is replaced by the approved one (ApprovedInputNotPassed, before the gate, when none is)."""
        self._check_unused()
        args, kwargs = self._call_arguments(args, kwargs)
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
        """Report that the call committed (for calls not made through `call`); queued for the
        background with report_success="after" (`outcome.report_pending`)."""
        self._start_report()
        envelope = self._success_envelope(result, evidence_ref)
        if self.report_mode == "after":
            self.client.report_later(envelope, idempotency_key=self.envelope_idempotency_key)
            return self._reported_later(envelope, result)
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

    def __init__(self, client: AsyncGateClient, **options: Any) -> None:
        mode = options.pop("report_success", None) or client.report_success
        super().__init__(default_retry_delay=client.default_retry_delay, report_success=mode, **options)
        self.client = client

    async def begin(self) -> Outcome | None:
        if self.grant is not None or self.outcome is not None:
            return self.outcome
        sent = self._input_for_gate()
        try:
            try:
                self.grant = await self._ask(sent)
            except ValidationFailed as error:
                if sent is None or not names_input(error):
                    raise
                self._input_refused(error)
                sent = None
                self.grant = await self._ask(None)
        except AttemptRefused as refusal:
            return self._refused(refusal)
        await self.client.check_approval_receipt(self.grant["step"], **self._receipt_names())
        return None

    async def _ask(self, sent: dict[str, Any] | None) -> AttemptGrant:
        self.input_sent = sent is not None
        await self.client.reports_settled(self.operation_ref)  # its queued success report lands first
        return await self.client.request_attempt(
            self.operation_ref,
            tool=self.tool,
            input_fingerprint=self.fingerprint,
            input=sent,
            run_id=self.run_id,
            correlation_id=self.correlation_id,
            idempotency_key=self.attempt_idempotency_key,
        )

    async def call(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Outcome:
        self._check_unused()
        args, kwargs = self._call_arguments(args, kwargs)
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
        if self.report_mode == "after":
            await self.client.report_later(envelope, idempotency_key=self.envelope_idempotency_key)
            return self._reported_later(envelope, result)
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
