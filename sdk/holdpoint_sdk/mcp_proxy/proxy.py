"""The recovery proxy: every guarded `tools/call` goes through Holdpoint's attempt gate, and its
result is reported as an envelope; everything else is passed to the upstream server unchanged.

For one guarded call the proxy records the tool under a name in Holdpoint's pattern (names.py:
`createInvoice` becomes `create_invoice-<hash>`; the client and the upstream keep the upstream's
name), and

1. fixes the `operation_ref`: the client's `_meta["dev.holdpoint/operation_ref"]` when it sends
   one, else `<run_id>/<tool>/<first 32 hex of the input fingerprint>`, so that an identical
   retry is the same step (and a committed write is refused `already_committed`);
2. asks the attempt gate with the input's RFC 8785 fingerprint and the input itself (contract
   v1.1: the reviewer reads what they approve). An input the gate will not take (over 32 KiB
   canonical, checked here; too deep or otherwise refused with a 422 naming `input`) is gated by
   its fingerprint alone, asked again under a new key: the write stays gated, the call still
   runs, and the answer says the reviewer sees only a fingerprint (`input_sent: false`,
   `input_withheld`). A refusal is answered with an `isError` result saying what the directive
   says, and the upstream is not called. After a reviewer approved an edited input (the
   directive carries `input`), the upstream is called with that input, never the client's, and
   the answer says so (`input_edited`, `input`, and the text line);
3. on a grant calls the upstream (passing `dev.holdpoint/*` keys in `_meta`), turns what came
   back into an envelope and posts it with an Idempotency-Key:
   - a `structuredContent` that is an envelope goes as the `mcp` dialect, its `tool`,
     `operation_ref`, `run_id` and `attempt` always the call's: the upstream cannot choose the
     step. One that named other values is reported so that Holdpoint refuses it, which
     escalates the call's own step (`malformed_envelope`) and quarantines the claim;
   - any other result is a success (a write that returned has committed);
   - a bare error result, an MCP error or a timeout is classified like the SDK's guard: on a
     tool with side effects it is `unknown` (verify), without side effects a retry later;
4. answers the upstream's result with Holdpoint's directive added: under `holdpoint` in
   `structuredContent`, in `_meta["dev.holdpoint/directive"]`, and as one text line.

A `hold` may be put to the client first (decide.py: a reviewer token configured and a client
that declared form elicitation; once per tools/call): an approval there asks the gate again at
once, a rejection closes the step. A `hold` may be waited for (`hold_wait_s`): after an
approval the proxy asks the gate again and the client receives the real result. A `verify`
calls the tool's `verification_tool` upstream with the `operation_ref` and reports what it
found. The proxy keeps no state of its own: everything it needs next time is in Holdpoint.

This module is the gate -> call -> report loop; the envelope and the failure a result stands
for are built in `reports`, the answer the client receives in `answers`.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from ..async_client import AsyncHoldpoint
from ..background import SUCCESS_DIRECTIVE
from ..client_base import Dialect
from ..envelopes import MAX_INPUT_BYTES, Failure, canonical_json, input_fingerprint
from ..errors import (
    AttemptRefused,
    DecisionTimeout,
    HoldpointError,
    HoldpointUnavailable,
    ValidationFailed,
)
from ..tracing import trace_context
from ..types import Directive, Step, VerificationOutcome
from .answers import call_answer, local_error, refused_answer
from .calls import (
    CLIENT_ASK,
    META,
    META_APPROVED,
    META_ATTEMPT,
    META_OPERATION_REF,
    META_RUN_ID,
    ToolCall,
    time_spent,
)
from .config import ProxyConfig
from .decide import ClientReview
from .names import ToolNames
from .reports import (
    UPSTREAM_NAMED,
    broken_failure,
    failure_envelope,
    mcp_error_failure,
    result_report,
    timeout_failure,
    verification_outcome,
)
from .upstream import Upstream

logger = logging.getLogger("holdpoint_sdk.mcp_proxy")
# One line per guarded tools/call with where its time went (HOLDPOINT_MCP_TIMINGS=1 shows it).
timing_logger = logging.getLogger("holdpoint_sdk.mcp_proxy.timing")

MAX_ROUNDS = 6  # gate -> call -> report rounds in one tools/call (waits for a reviewer included)
MAX_HELD_REFS = 1024  # steps this process answered "held" for, read again before the next gate


def _forwardable(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The client's params as the upstream gets them: no progress token (the upstream's progress
    could not reach the client through this session)."""
    if params is None:
        return None
    out = dict(params)
    meta = out.get("_meta")
    if isinstance(meta, Mapping):
        kept = {key: value for key, value in meta.items() if key != "progressToken"}
        if kept:
            out["_meta"] = kept
        else:
            out.pop("_meta")
    return out


class HoldpointProxy:
    """The tools/call logic, given a Holdpoint client and the upstream connection."""

    def __init__(
        self,
        config: ProxyConfig,
        holdpoint: AsyncHoldpoint,
        upstream: Upstream,
        review: ClientReview | None = None,
    ) -> None:
        self.config = config
        self.holdpoint = holdpoint
        self.upstream = upstream
        self.review = review  # None: no reviewer token, a hold is never put to the client
        # What the server answered about `input` (a v1 server refuses the field): a cache,
        # relearned after a restart, never state Holdpoint depends on.
        self.server_takes_input: bool | None = None
        self.closed_schemas: set[str] = set()  # tools whose outputSchema forbids extra keys
        self.tool_names = ToolNames()  # what the upstream listed, for the names Holdpoint records
        # Steps this process answered "held for a reviewer": before the next gate on one of them,
        # the step is read, so that an approval with an edited input is run rather than refused
        # (the gate would refuse the client's own input with approval_mismatch and hold the step
        # again). A cache: after a restart the worst case is that second review, never a write
        # of an input nobody approved.
        self.held_refs: OrderedDict[str, None] = OrderedDict()

    # --- pass-through ---------------------------------------------------------------------

    async def forward(self, method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
        result = await self.upstream.request(method, _forwardable(params), None)
        if method == "tools/list":
            self._note_listing(result)
        return result

    def _note_listing(self, listing: Mapping[str, Any]) -> None:
        tools = [
            tool
            for tool in listing.get("tools") or []
            if isinstance(tool, Mapping) and isinstance(tool.get("name"), str)
        ]
        self.tool_names.learn(tool["name"] for tool in tools)
        for tool in tools:
            schema = tool.get("outputSchema")
            if isinstance(schema, Mapping) and schema.get("additionalProperties") is False:
                self.closed_schemas.add(tool["name"])
            else:
                self.closed_schemas.discard(tool["name"])

    # --- tools/call -----------------------------------------------------------------------

    async def call_tool(self, params: Mapping[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        if not isinstance(name, str):
            raise MCPError(types.INVALID_PARAMS, "tools/call needs a tool name")
        policy = self.config.policy(name)
        if not policy.guarded:
            return await self.forward("tools/call", params)
        recorded_tool = self.tool_names.holdpoint_name(name)
        if recorded_tool is None:
            return local_error(
                f"Holdpoint: another tool of this server would be recorded under the same name as {name!r}; "
                "the call was not made."
            )
        arguments = params.get("arguments") or {}
        if not isinstance(arguments, Mapping):
            raise MCPError(types.INVALID_PARAMS, "tools/call arguments must be an object")
        raw_meta = params.get("_meta")
        client_meta = dict(raw_meta) if isinstance(raw_meta, Mapping) else {}
        try:
            canonical = canonical_json(arguments)  # once: the fingerprint and the gate's size limit
        except (TypeError, ValueError) as error:
            return local_error(f"Holdpoint: the input cannot be fingerprinted ({error}); the call was not made.")
        call = ToolCall(
            tool=name,
            recorded_tool=recorded_tool,
            arguments=dict(arguments),
            client_meta=client_meta,
            operation_ref="",
            run_id=self._run_id(client_meta),
            fingerprint=hashlib.sha256(canonical).hexdigest(),  # envelopes.input_fingerprint
            input_size=len(canonical),
        )
        call.operation_ref = self._operation_ref(call)
        started = time.perf_counter()
        try:
            # The MCP client's trace (its `_meta.traceparent`, as MCP clients pass W3C context)
            # on each Holdpoint call this tools/call makes; else this process's OpenTelemetry span.
            with trace_context(client_meta.get("traceparent"), client_meta.get("tracestate")):
                await self._approved_input_first(call)
                return await self._guarded(call)
        except HoldpointUnavailable as error:
            return local_error(f"Holdpoint could not be reached ({error.detail}); the call was not made.")
        except HoldpointError as error:
            # A key revoked, a throttle, a schema refusal: fail closed, and say why.
            return local_error(f"Holdpoint refused the call ({error.code}: {error.detail}); it was not made.")
        finally:
            if timing_logger.isEnabledFor(logging.INFO):
                total = (time.perf_counter() - started) * 1000
                waits = " ".join(f"{name}_ms={ms:.2f}" for name, ms in call.spent.items())
                own = total - sum(call.spent.values())
                timing_logger.info(
                    "timing tool=%s %s proxy_ms=%.2f total_ms=%.2f reports_queued=%d",
                    call.tool, waits, own, total, self.holdpoint.reports_queued,
                )  # fmt: skip

    def _run_id(self, meta: Mapping[str, Any]) -> str:
        run_id = meta.get(META_RUN_ID)
        if isinstance(run_id, str) and 1 <= len(run_id) <= 200 and run_id.isprintable():
            return run_id
        return self.config.run_id

    def _operation_ref(self, call: ToolCall) -> str:
        given = call.client_meta.get(META_OPERATION_REF)
        if isinstance(given, str) and 1 <= len(given) <= 200 and given.isprintable():
            return given
        tool = call.recorded_tool
        ref = f"{call.run_id}/{tool}/{call.fingerprint[:32]}"
        if len(ref) > 200:
            digest = hashlib.sha256(f"{call.run_id}\0{tool}\0{call.fingerprint}".encode()).hexdigest()
            ref = f"{tool}/{digest}"
        return ref

    async def _guarded(self, call: ToolCall) -> dict[str, Any]:
        policy = self.config.policy(call.tool)
        waited = 0.0
        hold_wait = self.config.hold_wait(call.tool)
        for _ in range(MAX_ROUNDS):
            try:
                grant = await self._ask_gate(call)
            except AttemptRefused as refusal:
                step, directive = refusal.step, refusal.directive
                if directive["action"] == "verify" and policy.verification_tool:
                    verified = await self._verify(call, policy.verification_tool)
                    if verified is not None:
                        step, directive = verified
                        if directive["action"] == "proceed":
                            continue  # not found, trusted: the gate grants another attempt
                if directive["action"] == "hold":
                    step, directive = await self._in_client(call, step, directive)
                    if directive["action"] == "proceed":
                        self._take_approved_input(call, directive)
                        continue
                if directive["action"] == "hold" and waited < hold_wait:
                    decided, spent = await self._wait(call, hold_wait - waited)
                    waited += spent
                    if decided is not None:
                        step, directive = decided, decided["directive"]
                        if directive["action"] == "proceed":
                            self._take_approved_input(call, directive)
                            continue
                return self._refused(call, refusal.code, step, directive)
            call.attempt, call.step = grant["attempt"], grant["step"]
            call.approved = _approved(grant["step"], call.fingerprint)
            # An approved input runs only under a receipt that verifies (ReceiptInvalid, a
            # HoldpointError: answered as a refusal, the upstream not called).
            await self.holdpoint.check_approval_receipt(
                grant["step"], operation_ref=call.operation_ref, tool=call.recorded_tool, fingerprint=call.fingerprint
            )
            result, failure, envelope, dialect = await self._run(call, policy.side_effects)
            if failure is None and self.config.report_success == "after" and _plain_success(envelope):
                await self._report_later(call, envelope, dialect)
                return self._answer(call, result, None, call.step, dict(SUCCESS_DIRECTIVE), reported=True)  # type: ignore[arg-type]
            step, directive, reported = await self._report(call, envelope, dialect)
            if reported and directive["action"] == "verify" and policy.verification_tool:
                verified = await self._verify(call, policy.verification_tool)
                if verified is not None:
                    step, directive = verified
            if reported and directive["action"] == "hold":
                step, directive = await self._in_client(call, step, directive)
                if directive["action"] == "proceed":
                    self._take_approved_input(call, directive)
                    continue
            if reported and directive["action"] == "hold" and waited < hold_wait:
                decided, spent = await self._wait(call, hold_wait - waited)
                waited += spent
                if decided is not None and decided["directive"]["action"] == "proceed":
                    self._take_approved_input(call, decided["directive"])
                    continue
                if decided is not None:
                    step, directive = decided, decided["directive"]
            return self._answer(call, result, failure, step, directive, reported=reported)
        return local_error(f"Holdpoint: step {call.operation_ref} did not settle; call again later.")

    async def _in_client(
        self, call: ToolCall, step: Step | None, directive: Directive
    ) -> tuple[Step | None, Directive]:
        """A hold put to the client's human, when a reviewer token is configured and the client
        declared form elicitation (decide.py); the step and directive after their decision (or
        another reviewer's meanwhile), or the ones given when the step did not move."""
        ask = CLIENT_ASK.get()
        if self.review is None or ask is None or call.asked_client:
            return step, directive
        call.asked_client = True
        decided = await self.review.decide(ask, call)
        if decided is None:
            return step, directive
        return decided, decided["directive"]

    def _take_approved_input(self, call: ToolCall, directive: Mapping[str, Any] | None) -> None:
        """After an approval with an edited input (contract v1.1), the approved input runs."""
        approved = (directive or {}).get("input")
        if isinstance(approved, Mapping) and input_fingerprint(approved) != call.fingerprint:
            call.arguments = dict(approved)
            canonical = canonical_json(call.arguments)
            call.fingerprint, call.input_size = hashlib.sha256(canonical).hexdigest(), len(canonical)
            call.input_edited = True

    async def _approved_input_first(self, call: ToolCall) -> None:
        """Take a pending edited approval of the step before asking the gate: the one this
        client last read, or, for a step this process answered "held", the step as it is now."""
        remembered = self.holdpoint.approved_input(call.operation_ref)
        if remembered is not None:
            self._take_approved_input(call, {"input": remembered})
            return
        if call.operation_ref not in self.held_refs:
            return
        try:
            step = await self.holdpoint.get_step(call.operation_ref)
        except HoldpointError as error:
            logger.info("could not read held step %s (%s); asking the gate", call.operation_ref, error.code)
            return
        if step["directive"]["action"] != "hold":
            self.held_refs.pop(call.operation_ref, None)
        self._take_approved_input(call, step["directive"])

    def _remember_held(self, call: ToolCall, directive: Mapping[str, Any]) -> None:
        if directive.get("action") == "hold":
            self.held_refs[call.operation_ref] = None
            self.held_refs.move_to_end(call.operation_ref)
            while len(self.held_refs) > MAX_HELD_REFS:
                self.held_refs.popitem(last=False)
        else:
            self.held_refs.pop(call.operation_ref, None)

    def _input_for_gate(self, call: ToolCall) -> dict[str, Any] | None:
        """The input as the gate takes it, or None (and `call.input_withheld` says why)."""
        call.input_withheld = None
        if self.config.send_input == "never":
            return None
        if self.config.send_input == "auto" and self.server_takes_input is False:
            call.input_withheld = "this Holdpoint does not take input on attempts (contract v1)"
            return None
        size = call.input_size
        if size > MAX_INPUT_BYTES:
            call.input_withheld = f"its canonical form is {size} bytes, over the {MAX_INPUT_BYTES} the gate takes"
            logger.info("not sending the input of %s on %s: %s", call.tool, call.operation_ref, call.input_withheld)
            return None
        return call.arguments

    async def _ask_gate(self, call: ToolCall) -> Any:
        sent = self._input_for_gate(call)
        try:
            with time_spent(call, "gate"):
                grant = await self._gate(call, sent)
        except ValidationFailed as error:
            refused = [e for e in error.errors if isinstance(e, Mapping) and _names_input(e.get("field"))]
            if sent is None or not refused or self.config.send_input == "always":
                raise  # a fingerprint mismatch is never papered over; "always" means always
            rules = ", ".join(sorted({str(e.get("rule") or "?") for e in refused}))
            if any(e.get("rule") == "additionalProperties" for e in refused):
                logger.info("Holdpoint does not take `input` on attempts (contract v1); sending fingerprints only")
                self.server_takes_input = False
            # The gate still gates the write by its fingerprint; the reviewer sees no input.
            call.input_withheld = f"Holdpoint refused it ({rules})"
            logger.warning(
                "the attempt gate refused the input of %s on %s (%s); asking again with its fingerprint only",
                call.tool,
                call.operation_ref,
                rules,
            )
            with time_spent(call, "gate"):
                grant, sent = await self._gate(call, None), None
        except AttemptRefused:
            call.input_sent = sent is not None
            raise
        call.input_sent = sent is not None
        return grant

    async def _gate(self, call: ToolCall, sent: Mapping[str, Any] | None) -> Any:
        # A success of this step still queued lands first, as it would have without the queue.
        await self.holdpoint.reports_settled(call.operation_ref)
        return await self.holdpoint.request_attempt(
            call.operation_ref,
            tool=call.recorded_tool,
            input_fingerprint=call.fingerprint,
            input=sent,
            run_id=call.run_id,
            idempotency_key="att_" + uuid.uuid4().hex,  # a new key: another body
        )

    async def _wait(self, call: ToolCall, seconds: float) -> tuple[Step | None, float]:
        started = time.monotonic()
        try:
            step = await self.holdpoint.wait_for_decision(
                call.operation_ref, timeout=seconds, initial_interval=0.25, max_interval=5.0
            )
        except DecisionTimeout:
            step = None
        except HoldpointError as error:
            # Holdpoint stopped answering while we waited: answer with what we know.
            logger.warning("waiting for a decision on %s failed: %s", call.operation_ref, error)
            step = None
        return step, time.monotonic() - started

    # --- the upstream call ----------------------------------------------------------------

    def _upstream_meta(self, call: ToolCall) -> dict[str, Any]:
        meta = {
            key: value
            for key, value in call.client_meta.items()
            if key != "progressToken" and not key.startswith(META)  # the proxy owns its namespace
        }
        meta[META_OPERATION_REF] = call.operation_ref
        meta[META_RUN_ID] = call.run_id
        if call.attempt is not None:
            meta[META_ATTEMPT] = call.attempt
        if call.approved:
            meta[META_APPROVED] = True
        return meta

    async def _run(
        self, call: ToolCall, side_effects: bool
    ) -> tuple[dict[str, Any] | None, Failure | None, dict[str, Any], Dialect]:
        """Call the upstream once; (result, failure, envelope to post, dialect)."""
        params = {"name": call.tool, "arguments": call.arguments, "_meta": self._upstream_meta(call)}
        timeout = self.config.call_timeout(call.tool)
        try:
            with time_spent(call, "upstream"):
                result = await self.upstream.request("tools/call", params, timeout)
        except TimeoutError:
            failure = timeout_failure(timeout, side_effects, self.holdpoint.default_retry_delay)
            return None, failure, failure_envelope(call, failure), "canonical"
        except MCPError as error:
            failure = mcp_error_failure(error, side_effects)
            return None, failure, failure_envelope(call, failure), "canonical"
        except Exception as error:  # the connection broke mid-call: it may have written
            logger.warning("upstream call failed: %r", error)
            failure = broken_failure(error, side_effects)
            return None, failure, failure_envelope(call, failure), "canonical"
        reported, envelope, dialect = result_report(call, result, side_effects)
        return result, reported, envelope, dialect

    # --- reporting ------------------------------------------------------------------------

    async def _report(
        self, call: ToolCall, envelope: dict[str, Any], dialect: Dialect
    ) -> tuple[Step | None, Directive, bool]:
        """Post the envelope; (step, directive, delivered). The upstream has run by now, so no
        Holdpoint error may hide its result: an undelivered report says so instead."""
        # One key per report: the client's retries of this post replay the stored answer.
        key = "env_" + uuid.uuid4().hex
        try:
            try:
                with time_spent(call, "envelope"):
                    answer = await self.holdpoint.post_envelope(envelope, idempotency_key=key, dialect=dialect)
            except ValidationFailed as error:
                # A malformed envelope from the upstream: Holdpoint quarantined it and escalated
                # the step; what the step says now is the directive.
                logger.warning("Holdpoint refused the envelope: %s %s", error.code, error.errors)
                step = await self.holdpoint.get_step(call.operation_ref)
                return step, step["directive"], True
        except HoldpointError as error:
            logger.warning("the envelope was not delivered: %s %s", error.code, error.detail)
            unreported: Directive = {
                "action": "verify",
                "may_write": False,
                "not_before": None,
                "reason": "attempt_unreported",
            }
            return call.step, unreported, False
        return answer["step"], answer["directive"], True

    async def _report_later(self, call: ToolCall, envelope: dict[str, Any], dialect: Dialect) -> None:
        """Queue a success's envelope (report_success="after", holdpoint_sdk.background): the
        result goes back now; if the report is lost, the step's next gate call verifies."""
        with time_spent(call, "envelope"):  # what the report costs the call now: its enqueueing
            await self.holdpoint.report_later(envelope, idempotency_key="env_" + uuid.uuid4().hex, dialect=dialect)
        queued = self.holdpoint.reports_queued
        log = logger.warning if queued and queued % 100 == 0 else logger.info
        log("success report of %s queued (%d report(s) in the queue)", call.operation_ref, queued)

    async def _verify(self, call: ToolCall, verification_tool: str) -> tuple[Step, Directive] | None:
        """Look the write up with the upstream's verification tool and report what it found."""
        params = {
            "name": verification_tool,
            "arguments": {"operation_ref": call.operation_ref},
            "_meta": {META_OPERATION_REF: call.operation_ref, META_RUN_ID: call.run_id},
        }
        evidence: str | None = None
        outcome: VerificationOutcome | None
        try:
            found = await self.upstream.request("tools/call", params, self.config.call_timeout(verification_tool))
        except (TimeoutError, MCPError) as error:
            logger.warning("verification tool %s failed: %r", verification_tool, error)
            outcome = "unavailable"
        else:
            outcome, evidence = verification_outcome(found)
        if outcome is None:
            logger.warning("verification tool %s gave no outcome; the step stays verifying", verification_tool)
            return None
        try:
            answer = await self.holdpoint.report_verification(
                call.operation_ref,
                outcome=outcome,
                evidence_ref=evidence,
            )
        except HoldpointError as error:
            logger.warning("the verification report was refused: %s", error)
            return None
        return answer["step"], answer["directive"]

    # --- answers to the client ------------------------------------------------------------

    def _refused(self, call: ToolCall, code: str, step: Step | None, directive: Mapping[str, Any]) -> dict[str, Any]:
        self._remember_held(call, directive)
        return refused_answer(call, code, step, directive, closed_schema=call.tool in self.closed_schemas)

    def _answer(
        self,
        call: ToolCall,
        result: dict[str, Any] | None,
        failure: Failure | None,
        step: Step | None,
        directive: Directive,
        *,
        reported: bool,
    ) -> dict[str, Any]:
        self._remember_held(call, directive)
        return call_answer(
            call,
            result,
            failure,
            step,
            directive,
            reported=reported,
            closed_schema=call.tool in self.closed_schemas,
        )


def _plain_success(envelope: Mapping[str, Any]) -> bool:
    """A success whose directive can only be `stop`: a committed ok envelope about the call's
    own step (one that named another step is reported at once, to be refused)."""
    inner = envelope.get("structuredContent", envelope) if "structuredContent" in envelope else envelope
    return (
        isinstance(inner, Mapping)
        and inner.get("ok") is True
        and inner.get("commit_state") == "committed"
        and UPSTREAM_NAMED not in inner
        and not envelope.get("isError")
    )


def _names_input(name: Any) -> bool:
    """An error about `input` itself (too large, too deep, not an object, unknown to a v1
    server), not about `input_fingerprint`."""
    return isinstance(name, str) and (name == "input" or name.startswith(("input.", "input/", "input[")))


def _approved(step: Mapping[str, Any], fingerprint: str) -> bool:
    """A reviewer approved this step (for this input, when the approval names one)."""
    for decision in reversed(step.get("decisions") or []):
        if decision.get("action") == "approve":
            bound = decision.get("input_fingerprint")
            return bound in (None, fingerprint)
    return False


__all__ = ["HoldpointProxy"]
