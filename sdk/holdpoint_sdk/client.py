"""The synchronous client for the Holdpoint API (contract v1, section 4)."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast
from urllib.parse import quote

import httpx

from .background import DEFAULT_QUEUE_SIZE, FLUSH_TIMEOUT_S, PendingReport, ReportQueue, ReportSuccess, check_mode
from .client_base import (
    WAITING_ACTIONS,
    ApiCall,
    ClientBase,
    ConditionalStep,
    Dialect,
    decided,
    drop_none,
    poll_delay,
    time_param,
)
from .envelopes import Failure, now_utc, parse_rfc3339
from .errors import AttemptRefused, DecisionTimeout, HoldpointError
from .guard import Guard, Outcome, takes_the_input
from .receipts import check_approval
from .tracing import trace_headers
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

logger = logging.getLogger("holdpoint_sdk")


class Holdpoint(ClientBase):
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
        report_success: ReportSuccess = "before",
        report_queue_size: int = DEFAULT_QUEUE_SIZE,
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
        # report_success="after": a guard's success envelope is queued here (background.py).
        self.report_success = check_mode(report_success)
        self._report_queue_size = report_queue_size
        self._reports: ReportQueue | None = None

    def close(self) -> None:
        """Flush the queued success reports (at most FLUSH_TIMEOUT_S), then close."""
        if self._reports is not None:
            self._reports.close()
        self._http.close()

    def report_later(
        self, envelope: Mapping[str, Any], *, idempotency_key: str, dialect: Dialect = "canonical"
    ) -> None:
        """Queue a success's envelope, posted in the background under `idempotency_key`."""
        if self._reports is None:
            self._reports = ReportQueue(self._post_pending, maxsize=self._report_queue_size)
        self._reports.submit(PendingReport(envelope, idempotency_key, dialect))

    def _post_pending(self, report: PendingReport) -> None:
        self.post_envelope(report.envelope, idempotency_key=report.idempotency_key, dialect=report.dialect)  # type: ignore[arg-type]

    def reports_settled(self, operation_ref: str) -> None:
        """Wait for the queued success report of this step, if any (before its next gate call)."""
        if self._reports is not None and not self._reports.settled(operation_ref):
            logger.warning("holdpoint: the success report of %s is still queued", operation_ref)

    @property
    def reports_queued(self) -> int:
        """Success reports queued or being posted (report_success="after")."""
        return len(self._reports) if self._reports is not None else 0

    def flush_reports(self, timeout: float = FLUSH_TIMEOUT_S) -> bool:
        """Wait for the queued success reports; False if some are still queued after `timeout`."""
        return self._reports.flush(timeout) if self._reports is not None else True

    def __enter__(self) -> Holdpoint:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _send(self, call: ApiCall) -> httpx.Response:
        try_number = 0
        while True:
            try:
                response = self._http.request(
                    call.method,
                    call.path,
                    params=call.params,
                    content=call.body,
                    headers=trace_headers(call.headers),
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

    def _fetch(self, call: ApiCall) -> Any:
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

    def check_approval_receipt(
        self, step: Mapping[str, Any], *, operation_ref: str, tool: str, fingerprint: str
    ) -> None:
        """Raise ReceiptInvalid unless the approval this input runs under, if the step has one,
        carries a receipt that Holdpoint signed for this step, tool and input (contract §13)."""
        check_approval(
            step, base_url=self.base_url, operation_ref=operation_ref, tool=tool, fingerprint=fingerprint,
            fetch=lambda: self._fetch(self._jwks_call()),
        )  # fmt: skip

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
        return cast(CodeList, self._fetch(ApiCall("GET", f"/api/v1/tools/{quote(tool, safe='')}/codes")))

    def tool_metrics(
        self,
        tool: str,
        *,
        since: dt.datetime | str | None = None,
        until: dt.datetime | str | None = None,
    ) -> Metrics:
        params = drop_none({"since": time_param(since), "until": time_param(until)})
        call = ApiCall("GET", f"/api/v1/tools/{quote(tool, safe='')}/metrics", params=params)
        return cast(Metrics, self._fetch(call))

    def run_skipped(self, run_id: str) -> Skipped:
        path = f"/api/v1/runs/{quote(run_id, safe='')}/skipped"
        return cast(Skipped, self._fetch(ApiCall("GET", path)))

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
        report_success: ReportSuccess | None = None,
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
            report_success=report_success,
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
            if step is not None and decided(step, waiting_actions, now_utc()):
                return step
            left = deadline - self._clock()
            if left <= 0:
                raise DecisionTimeout(f"no decision on {operation_ref!r} within {timeout}s", step=step)
            delay = poll_delay(step, interval, now=now_utc()) if step else interval
            self._sleep(min(delay, left))
            interval = min(interval * 2, max_interval)

    def sleep_until(self, when: dt.datetime | str | None) -> None:
        """Sleep until a directive's not_before (no-op when it is None or past)."""
        moment = parse_rfc3339(when) if isinstance(when, str) else when
        if moment is not None:
            seconds = (moment - now_utc()).total_seconds()
            if seconds > 0:
                self._sleep(seconds)
