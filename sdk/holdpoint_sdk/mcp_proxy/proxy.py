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

A `hold` may be waited for (`hold_wait_s`): after an approval the proxy asks the gate again and
the client receives the real result. A `verify` calls the tool's `verification_tool` upstream
with the `operation_ref` and reports what it found. The proxy keeps no state of its own:
everything it needs next time is in Holdpoint.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import mcp_types as types
from mcp.shared.exceptions import MCPError

from ..async_client import AsyncHoldpoint
from ..client import Dialect
from ..envelopes import MAX_INPUT_BYTES, Failure, canonical_json, input_fingerprint, now_utc, success_envelope
from ..errors import (
    AttemptRefused,
    DecisionTimeout,
    HoldpointError,
    HoldpointUnavailable,
    ValidationFailed,
)
from ..types import Directive, Step, VerificationOutcome
from .config import ProxyConfig
from .names import ToolNames

logger = logging.getLogger("holdpoint_sdk.mcp_proxy")
# One line per guarded tools/call with where its time went (HOLDPOINT_MCP_TIMINGS=1 shows it).
timing_logger = logging.getLogger("holdpoint_sdk.mcp_proxy.timing")

META = "dev.holdpoint/"
META_OPERATION_REF = META + "operation_ref"
META_RUN_ID = META + "run_id"
META_ATTEMPT = META + "attempt"
META_APPROVED = META + "approved"
META_DIRECTIVE = META + "directive"
# The field under which an envelope that named another step is reported (and refused).
UPSTREAM_NAMED = "step_named_by_upstream"
# A JSON body of the mcp dialect must stay under Holdpoint's 64 KiB: big content is left out.
MAX_REPORTED_CONTENT = 16 * 1024
MAX_REPORTED_RESULT = 16 * 1024
MAX_MESSAGE = 500
MAX_NAMED = 200  # characters of each step field an upstream named wrongly, kept as evidence
MAX_ROUNDS = 6  # gate -> call -> report rounds in one tools/call (waits for a reviewer included)
MAX_HELD_REFS = 1024  # steps this process answered "held" for, read again before the next gate


class Upstream(Protocol):
    """What the proxy needs of the upstream connection (an MCP ClientSession)."""

    async def request(self, method: str, params: Mapping[str, Any] | None, timeout: float | None) -> dict[str, Any]:
        """Send one request; its raw result (wire names). Raises MCPError, TimeoutError."""
        ...


class _RawRequest(types.Request[dict[str, Any] | None, str]):
    """Any request, its params passed as they came (the typed requests would drop what they
    do not model)."""

    method: str
    params: dict[str, Any] | None = None


class SessionUpstream:
    """An MCP `ClientSession` as the proxy's upstream: raw requests, raw results."""

    def __init__(self, session: Any) -> None:
        from pydantic import TypeAdapter

        self.session = session
        self._raw = TypeAdapter(dict[str, Any])

    async def request(self, method: str, params: Mapping[str, Any] | None, timeout: float | None) -> dict[str, Any]:
        request = _RawRequest(method=method, params=dict(params) if params is not None else None)
        try:
            result: dict[str, Any] = await self.session.send_request(
                request, self._raw, request_read_timeout_seconds=timeout
            )
        except MCPError as error:
            if error.code == types.REQUEST_TIMEOUT:
                raise TimeoutError(error.message) from error
            raise
        return result


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


def _short(text: str, limit: int = MAX_MESSAGE) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _text_of(result: Mapping[str, Any]) -> str:
    parts = [block.get("text", "") for block in result.get("content") or [] if isinstance(block, Mapping)]
    return " ".join(part for part in parts if isinstance(part, str)).strip()


def _json_size(value: Any) -> int:
    try:
        return len(json.dumps(value, ensure_ascii=False, allow_nan=False))
    except (TypeError, ValueError):
        return -1


def looks_like_envelope(value: Any) -> bool:
    """A structuredContent that is a Holdpoint envelope (contract §2), not a plain result."""
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("ok"), bool)
        and "commit_state" in value
        and ("code" in value or value.get("ok") is True)
    )


def describe(directive: Mapping[str, Any], step: Mapping[str, Any] | None, operation_ref: str) -> str:
    """One line a model can follow, from the directive alone (never from the tool's text)."""
    action = directive.get("action")
    reason = directive.get("reason") or ""
    url = (step or {}).get("url")
    where = f" at {url}" if url else ""
    if action == "proceed":
        return f"Holdpoint: step {operation_ref} may proceed ({reason})."
    if action == "stop":
        state = (step or {}).get("state")
        if state == "succeeded" or reason in ("committed", "verified_committed", "already_committed"):
            return f"Holdpoint: step {operation_ref} is done (committed); do not call this tool again for it."
        return f"Holdpoint: step {operation_ref} is closed ({reason}); do not call this tool again for it."
    if action == "wait":
        return (
            f"Holdpoint: wait until {directive.get('not_before') or 'later'}, then call again with the same "
            f"input ({reason})."
        )
    if action == "verify":
        return (
            f"Holdpoint: the outcome of step {operation_ref} is unknown; do not call again: it is being "
            f"verified{where} ({reason})."
        )
    if action == "fix_input":
        details = ((step or {}).get("last_envelope") or {}).get("safe_details") or {}
        field = details.get("field")
        blame = f" (field: {field})" if isinstance(field, str) else ""
        return f"Holdpoint: fix the input{blame} and call again; the same input will be refused ({reason})."
    if action == "hold":
        return f"Holdpoint: held for a reviewer{where}; do not call again until it is decided ({reason})."
    return f"Holdpoint: {action} ({reason})."


@dataclass
class _Call:
    """One client tools/call, as the proxy carries it from gate to report."""

    tool: str  # the upstream's name, which it is called by
    recorded_tool: str  # the name Holdpoint records (names.py): the gate's and the envelopes'
    arguments: dict[str, Any]
    client_meta: dict[str, Any]
    operation_ref: str
    run_id: str
    fingerprint: str
    input_size: int  # bytes of the input's canonical JSON (the gate takes up to MAX_INPUT_BYTES)
    attempt: int | None = None
    step: Step | None = None
    approved: bool = False
    input_sent: bool = False  # the gate received the input itself, not only its fingerprint
    input_withheld: str | None = None  # why it did not, when the proxy meant to send it
    input_edited: bool = False  # a reviewer approved an edited input: `arguments` is theirs
    spent: dict[str, float] = field(default_factory=dict)  # ms waiting for gate, upstream, envelope


class HoldpointProxy:
    """The tools/call logic, given a Holdpoint client and the upstream connection."""

    def __init__(self, config: ProxyConfig, holdpoint: AsyncHoldpoint, upstream: Upstream) -> None:
        self.config = config
        self.holdpoint = holdpoint
        self.upstream = upstream
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
            return self._local_error(
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
            return self._local_error(f"Holdpoint: the input cannot be fingerprinted ({error}); the call was not made.")
        call = _Call(
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
            await self._approved_input_first(call)
            return await self._guarded(call)
        except HoldpointUnavailable as error:
            return self._local_error(f"Holdpoint could not be reached ({error.detail}); the call was not made.")
        except HoldpointError as error:
            # A key revoked, a throttle, a schema refusal: fail closed, and say why.
            return self._local_error(f"Holdpoint refused the call ({error.code}: {error.detail}); it was not made.")
        finally:
            if timing_logger.isEnabledFor(logging.INFO):
                total = (time.perf_counter() - started) * 1000
                waits = " ".join(f"{name}_ms={ms:.2f}" for name, ms in call.spent.items())
                own = total - sum(call.spent.values())
                timing_logger.info("timing tool=%s %s proxy_ms=%.2f total_ms=%.2f", call.tool, waits, own, total)

    def _run_id(self, meta: Mapping[str, Any]) -> str:
        run_id = meta.get(META_RUN_ID)
        if isinstance(run_id, str) and 1 <= len(run_id) <= 200 and run_id.isprintable():
            return run_id
        return self.config.run_id

    def _operation_ref(self, call: _Call) -> str:
        given = call.client_meta.get(META_OPERATION_REF)
        if isinstance(given, str) and 1 <= len(given) <= 200 and given.isprintable():
            return given
        tool = call.recorded_tool
        ref = f"{call.run_id}/{tool}/{call.fingerprint[:32]}"
        if len(ref) > 200:
            digest = hashlib.sha256(f"{call.run_id}\0{tool}\0{call.fingerprint}".encode()).hexdigest()
            ref = f"{tool}/{digest}"
        return ref

    async def _guarded(self, call: _Call) -> dict[str, Any]:
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
            result, failure, envelope, dialect = await self._run(call, policy.side_effects)
            step, directive, reported = await self._report(call, envelope, dialect)
            if reported and directive["action"] == "verify" and policy.verification_tool:
                verified = await self._verify(call, policy.verification_tool)
                if verified is not None:
                    step, directive = verified
            if reported and directive["action"] == "hold" and waited < hold_wait:
                decided, spent = await self._wait(call, hold_wait - waited)
                waited += spent
                if decided is not None and decided["directive"]["action"] == "proceed":
                    self._take_approved_input(call, decided["directive"])
                    continue
                if decided is not None:
                    step, directive = decided, decided["directive"]
            return self._answer(call, result, failure, step, directive, reported=reported)
        return self._local_error(f"Holdpoint: step {call.operation_ref} did not settle; call again later.")

    def _take_approved_input(self, call: _Call, directive: Mapping[str, Any] | None) -> None:
        """After an approval with an edited input (contract v1.1), the approved input runs."""
        approved = (directive or {}).get("input")
        if isinstance(approved, Mapping) and input_fingerprint(approved) != call.fingerprint:
            call.arguments = dict(approved)
            canonical = canonical_json(call.arguments)
            call.fingerprint, call.input_size = hashlib.sha256(canonical).hexdigest(), len(canonical)
            call.input_edited = True

    async def _approved_input_first(self, call: _Call) -> None:
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

    def _remember_held(self, call: _Call, directive: Mapping[str, Any]) -> None:
        if directive.get("action") == "hold":
            self.held_refs[call.operation_ref] = None
            self.held_refs.move_to_end(call.operation_ref)
            while len(self.held_refs) > MAX_HELD_REFS:
                self.held_refs.popitem(last=False)
        else:
            self.held_refs.pop(call.operation_ref, None)

    def _input_for_gate(self, call: _Call) -> dict[str, Any] | None:
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

    async def _ask_gate(self, call: _Call) -> Any:
        sent = self._input_for_gate(call)
        try:
            with _spent(call, "gate"):
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
            with _spent(call, "gate"):
                grant, sent = await self._gate(call, None), None
        except AttemptRefused:
            call.input_sent = sent is not None
            raise
        call.input_sent = sent is not None
        return grant

    async def _gate(self, call: _Call, sent: Mapping[str, Any] | None) -> Any:
        return await self.holdpoint.request_attempt(
            call.operation_ref,
            tool=call.recorded_tool,
            input_fingerprint=call.fingerprint,
            input=sent,
            run_id=call.run_id,
            idempotency_key="att_" + uuid.uuid4().hex,  # a new key: another body
        )

    async def _wait(self, call: _Call, seconds: float) -> tuple[Step | None, float]:
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

    def _upstream_meta(self, call: _Call) -> dict[str, Any]:
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
        self, call: _Call, side_effects: bool
    ) -> tuple[dict[str, Any] | None, Failure | None, dict[str, Any], Dialect]:
        """Call the upstream once; (result, failure, envelope to post, dialect)."""
        params = {"name": call.tool, "arguments": call.arguments, "_meta": self._upstream_meta(call)}
        timeout = self.config.call_timeout(call.tool)
        try:
            with _spent(call, "upstream"):
                result = await self.upstream.request("tools/call", params, timeout)
        except TimeoutError:
            failure = _timeout_failure(timeout, side_effects, self.holdpoint.default_retry_delay)
            return None, failure, self._error_envelope(call, failure), "canonical"
        except MCPError as error:
            failure = _mcp_error_failure(error, side_effects)
            return None, failure, self._error_envelope(call, failure), "canonical"
        except Exception as error:  # the connection broke mid-call: it may have written
            logger.warning("upstream call failed: %r", error)
            failure = _broken_failure(error, side_effects)
            return None, failure, self._error_envelope(call, failure), "canonical"
        structured = result.get("structuredContent")
        if looks_like_envelope(structured):
            return result, None, self._mcp_envelope(call, result), "mcp"
        if result.get("isError"):
            failure = _bare_error_failure(_text_of(result), side_effects)
            return result, failure, self._error_envelope(call, failure), "canonical"
        reported = structured if structured is not None and 0 <= _json_size(structured) <= MAX_REPORTED_RESULT else None
        envelope = success_envelope(
            tool=call.recorded_tool,
            operation_ref=call.operation_ref,
            occurred_at=now_utc(),
            result=reported,
            attempt=call.attempt,
            run_id=call.run_id,
        )
        return result, None, envelope, "canonical"

    def _error_envelope(self, call: _Call, failure: Failure) -> dict[str, Any]:
        step = call.step
        remaining = (step["max_attempts"] - step["attempts"]) if step else 0
        return failure.envelope(
            tool=call.recorded_tool,
            operation_ref=call.operation_ref,
            attempts_remaining=remaining,
            occurred_at=now_utc(),
            attempt=call.attempt,
            run_id=call.run_id,
        )

    def _mcp_envelope(self, call: _Call, result: Mapping[str, Any]) -> dict[str, Any]:
        """The upstream's envelope about the call's own step: the step's fields are always the
        call's. One that named another step is reported so that Holdpoint rejects it, and so
        escalates the call's step (`malformed_envelope`) and quarantines what it claimed."""
        inner = dict(result["structuredContent"])
        named = _names_another_step(call, inner)
        for key, value in (
            ("tool", call.recorded_tool),
            ("operation_ref", call.operation_ref),
            ("run_id", call.run_id),
            ("attempt", call.attempt),
        ):
            if value is not None:
                inner[key] = value
            else:
                inner.pop(key, None)
        if named:
            logger.warning(
                "the upstream's envelope for %s named another step (%s); reporting it as malformed",
                call.operation_ref,
                ", ".join(sorted(named)),
            )
            # An unknown top-level field: Holdpoint refuses it (contract §2) and names it.
            inner[UPSTREAM_NAMED] = named
        content = result.get("content") or []
        if _json_size(content) < 0 or _json_size(content) > MAX_REPORTED_CONTENT:
            content = []  # content blocks are MCP's business; Holdpoint keeps the envelope
        body: dict[str, Any] = {"content": content, "structuredContent": inner}
        if "isError" in result:
            body["isError"] = bool(result["isError"])
        return body

    # --- reporting ------------------------------------------------------------------------

    async def _report(
        self, call: _Call, envelope: dict[str, Any], dialect: Dialect
    ) -> tuple[Step | None, Directive, bool]:
        """Post the envelope; (step, directive, delivered). The upstream has run by now, so no
        Holdpoint error may hide its result: an undelivered report says so instead."""
        # One key per report: the client's retries of this post replay the stored answer.
        key = "env_" + uuid.uuid4().hex
        try:
            try:
                with _spent(call, "envelope"):
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

    async def _verify(self, call: _Call, verification_tool: str) -> tuple[Step, Directive] | None:
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
            outcome, evidence = _verification_outcome(found)
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

    def _holdpoint_block(
        self, call: _Call, step: Mapping[str, Any] | None, directive: Mapping[str, Any], **more: Any
    ) -> dict[str, Any]:
        block = {
            "operation_ref": call.operation_ref,
            "run_id": call.run_id,
            "attempt": call.attempt,
            "state": (step or {}).get("state"),
            "step_url": (step or {}).get("url"),
            "directive": dict(directive),
            "input_sent": call.input_sent,
        }
        if call.input_withheld:
            block["input_withheld"] = call.input_withheld
        if call.input_edited:
            # Approved by a reviewer (Holdpoint refuses an edit that carries a secret).
            block["input_edited"] = True
            block["input"] = call.arguments
        block.update(more)
        return block

    def _line(self, call: _Call, step: Mapping[str, Any] | None, directive: Mapping[str, Any]) -> str:
        line = describe(directive, step, call.operation_ref)
        if call.input_edited:
            line += " A reviewer approved an edited input: the tool was called with it, not with yours (see input)."
        if directive.get("action") == "hold" and call.input_withheld:
            line += f" The reviewer sees only the input's fingerprint: {call.input_withheld}."
        return line

    def _decorate(self, call: _Call, result: dict[str, Any], block: dict[str, Any], line: str) -> dict[str, Any]:
        out = dict(result)
        out["content"] = [*(result.get("content") or []), {"type": "text", "text": line}]
        structured = result.get("structuredContent")
        if call.tool not in self.closed_schemas or result.get("isError"):
            if structured is None:
                out["structuredContent"] = {"holdpoint": block}
            elif isinstance(structured, Mapping) and "holdpoint" not in structured:
                out["structuredContent"] = {**structured, "holdpoint": block}
        meta = dict(result.get("_meta") or {})
        meta[META_DIRECTIVE] = block
        out["_meta"] = meta
        return out

    def _refused(self, call: _Call, code: str, step: Step | None, directive: Mapping[str, Any]) -> dict[str, Any]:
        block = self._holdpoint_block(call, step, directive, refused=code)
        self._remember_held(call, directive)
        line = self._line(call, step, directive) + " The tool was not called."
        return self._decorate(call, {"content": [], "isError": True}, block, line)

    def _answer(
        self,
        call: _Call,
        result: dict[str, Any] | None,
        failure: Failure | None,
        step: Step | None,
        directive: Directive,
        *,
        reported: bool,
    ) -> dict[str, Any]:
        block = self._holdpoint_block(call, step, directive, reported=reported)
        self._remember_held(call, directive)
        line = self._line(call, step, directive)
        if not reported:
            line += " (Holdpoint could not be told of this call; its next attempt will ask for verification.)"
        if result is None:
            # No result came back (timeout, MCP error, broken connection).
            assert failure is not None
            committed = step is not None and step["state"] == "succeeded"
            what = failure.agent_message or failure.code
            text = f"The tool call did not answer normally ({what})."
            if committed:
                text += " Holdpoint verified that it committed."
            return self._decorate(
                call, {"content": [{"type": "text", "text": text}], "isError": not committed}, block, line
            )
        return self._decorate(call, result, block, line)

    def _local_error(self, text: str) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": text}], "isError": True}


@contextmanager
def _spent(call: _Call, what: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        call.spent[what] = call.spent.get(what, 0.0) + (time.perf_counter() - started) * 1000


def _names_another_step(call: _Call, envelope: Mapping[str, Any]) -> dict[str, Any]:
    """The step fields of the upstream's envelope that are not the call's own (its tool may go
    by the upstream's name or by the one Holdpoint records)."""
    own: dict[str, tuple[Any, ...]] = {
        "tool": (call.tool, call.recorded_tool),
        "operation_ref": (call.operation_ref,),
        "run_id": (call.run_id,),
        "attempt": (call.attempt,),
    }
    return {
        # As JSON text, cut: evidence for the quarantine that cannot push the body over its limit.
        key: _short(json.dumps(envelope[key], ensure_ascii=False, default=repr), MAX_NAMED)
        for key, allowed in own.items()
        if key in envelope and not any(_same(envelope[key], value) for value in allowed)
    }


def _same(value: Any, own: Any) -> bool:
    return type(value) is type(own) and value == own  # strict: True is not attempt 1


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


def _verification_outcome(found: Mapping[str, Any]) -> tuple[VerificationOutcome | None, str | None]:
    """(outcome, evidence_ref) from a verification tool's result: `{"outcome": committed |
    not_found | unavailable, "evidence_ref"?}` or `{"found": bool, "evidence_ref"?}`."""
    if found.get("isError"):
        return "unavailable", None
    data = found.get("structuredContent")
    if not isinstance(data, Mapping):
        return None, None
    evidence = data.get("evidence_ref")
    evidence = evidence if isinstance(evidence, str) and 1 <= len(evidence) <= 200 else None
    outcome = data.get("outcome")
    if outcome == "committed" or outcome == "not_found" or outcome == "unavailable":
        return outcome, evidence
    if isinstance(data.get("found"), bool):
        return ("committed" if data["found"] else "not_found"), evidence
    return None, None


def _timeout_failure(timeout: float, side_effects: bool, default_delay: float) -> Failure:
    message = f"the MCP server did not answer within {timeout:g}s"
    if side_effects:
        return Failure.outcome_unknown("UPSTREAM_TIMEOUT", agent_message=message + "; it may have committed")
    not_before = now_utc() + dt.timedelta(seconds=default_delay)
    return Failure.retry_later("UPSTREAM_TIMEOUT", not_before=not_before, category="dependency", agent_message=message)


def _mcp_error_failure(error: MCPError, side_effects: bool) -> Failure:
    message = _short(f"MCP error {error.code}: {error.message}")
    if error.code == types.INVALID_PARAMS:
        # Refused before the tool ran: the input is what to fix.
        return Failure.invalid_input("INVALID_PARAMS", field="arguments", agent_message=message)
    if error.code == types.METHOD_NOT_FOUND:
        return Failure.escalate("TOOL_NOT_FOUND", category="validation", agent_message=message)
    if side_effects:
        return Failure.outcome_unknown("UPSTREAM_ERROR", agent_message=message + "; it may have committed")
    return Failure.escalate("UPSTREAM_ERROR", category="dependency", agent_message=message)


def _broken_failure(error: BaseException, side_effects: bool) -> Failure:
    message = f"{type(error).__name__}: the connection to the MCP server broke during the call"
    if side_effects:
        return Failure.outcome_unknown("UPSTREAM_DISCONNECTED", agent_message=message + "; it may have committed")
    return Failure.escalate("UPSTREAM_DISCONNECTED", category="dependency", agent_message=message)


def _bare_error_failure(text: str, side_effects: bool) -> Failure:
    message = _short("the tool reported an error" + (f": {text}" if text else ""))
    if side_effects:
        return Failure.outcome_unknown("TOOL_ERROR", category="internal", agent_message=message)
    return Failure.escalate("TOOL_ERROR", category="internal", agent_message=message)


__all__ = [
    "META_APPROVED",
    "META_ATTEMPT",
    "META_DIRECTIVE",
    "META_OPERATION_REF",
    "META_RUN_ID",
    "HoldpointProxy",
    "SessionUpstream",
    "Upstream",
    "describe",
    "looks_like_envelope",
]
