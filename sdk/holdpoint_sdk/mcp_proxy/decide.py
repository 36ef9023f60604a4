"""Deciding a held call in the MCP client (issue 29, point 5): with a reviewer token configured
and a client that declared form elicitation, a call Holdpoint holds for approval is put to the
client as a form, and the answer is a decision of the token's user through the reviewer API.

- The form is written from the step as the reviewer API serves it (the input as Holdpoint
  stored it, redacted; its fingerprint; the rule that held it; the quorum and the group), never
  from what the client sent, so that the human approves what the approval binds.
- accept approves (or rejects, when the form's `decision` says so), decline rejects; both with
  `If-Match`, the ETag of the version the form showed: a step that moved meanwhile is refused
  412 and nothing is decided. Everything else of contract §3, §11 and §12 is Holdpoint's to
  apply: a four-eyes step stays held after one approval, a deny rule or a group refuses.
- cancel, no answer within `elicit_timeout_s`, or a refusal: nothing is decided, and the hold is
  answered as without a client that can ask, with what happened in the text.
"""

from __future__ import annotations

import json
import logging
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import anyio
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..errors import HoldpointError
from ..reviewer import AsyncReviewer
from ..types import DecisionAction, Step
from .calls import Ask, ToolCall

logger = logging.getLogger("holdpoint_sdk.mcp_proxy")

INPUT_SHOWN = 600  # characters of the input's JSON in the form; the step page shows all of it
REASON_MAX = 1000  # the reviewer API's limit
APPROVED_REASON = "approved in the MCP client"
DECLINED_REASON = "declined in the MCP client"

# The form: a decision (approve by default; reject to give a reason with it) and a reason.
# Only flat primitive properties: what MCP's form mode allows.
REQUESTED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {
            "type": "string",
            "title": "Decision",
            "description": "approve lets the call run; reject closes the step (decline rejects too)",
            "enum": ["approve", "reject"],
            "default": "approve",
        },
        "reason": {
            "type": "string",
            "title": "Reason",
            "description": "kept with the decision in Holdpoint's audit log",
            "maxLength": REASON_MAX,
        },
    },
    "required": [],
}

_HELD_BECAUSE = {
    "approval_pending": "the tool's answer asked for a reviewer",
    "approval_mismatch": "the input differs from the one a reviewer approved",
    "approval_required_by_rule": "a rule requires approval",
}


def form_capable(elicitation: Mapping[str, Any] | None) -> bool:
    """Whether a client's declared `elicitation` capability covers form mode: `{}` (before
    2025-11-25 the only mode) or one naming `form`."""
    if not isinstance(elicitation, Mapping):
        return False
    return "form" in elicitation or "url" not in elicitation


def session_ask(session: ServerSession) -> Ask | None:
    """The SDK server's way to put a form to its client (the lane has its own), or None when
    the client did not declare form elicitation or speaks the 2026 per-request protocol (whose
    elicitation is an input-required result, not a request)."""
    capabilities = session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None or session.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return None
    if not form_capable(elicitation.model_dump(exclude_none=True)):
        return None

    async def ask(message: str, schema: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        try:
            with anyio.fail_after(timeout):
                result = await session.elicit_form(message, schema)
        except TimeoutError:
            return None
        except MCPError as error:
            logger.info("the client answered the form with an error: %s", error)
            return None
        return result.model_dump(by_alias=True, exclude_none=True)

    return ask


def _printable(text: str) -> str:
    """Control and format characters (bidi overrides among them) escaped: the input is the
    agent's, and must not reorder or hide what the form says around it."""
    return "".join(
        f"\\u{ord(char):04x}" if unicodedata.category(char) in ("Cc", "Cf", "Co", "Cs") else char for char in text
    )


def input_in_short(step: Mapping[str, Any]) -> str:
    proposal = step.get("proposal") or {}
    value = proposal.get("input")
    if not isinstance(value, Mapping):
        return "(the agent sent no input: only its fingerprint is bound)"
    text = _printable(json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True))
    if len(text) > INPUT_SHOWN:
        text = text[:INPUT_SHOWN] + f"... ({len(text)} characters; all of it on the step page)"
    if proposal.get("input_redacted"):
        text += " (secrets redacted)"
    return text


def held_by(step: Mapping[str, Any]) -> str:
    """The rule that held the step (name, version, when), else why the step waits."""
    policy = step.get("policy") or {}
    rule = policy.get("rule") if policy.get("effect") == "require_approval" else None
    if isinstance(rule, Mapping) and rule.get("name"):
        when = f": {_printable(str(rule['when']))}" if rule.get("when") else ""
        return f"rule {rule['name']} v{rule.get('version')}{when}"
    reason = str(step.get("reason") or "")
    because = _HELD_BECAUSE.get(reason, reason)
    code = (step.get("last_envelope") or {}).get("code")
    return f"{because} ({code})" if code and reason == "approval_pending" else because


def approvals_so_far(step: Mapping[str, Any]) -> list[str]:
    """The distinct reviewers whose approval of the input under review counts now: approvals of
    its fingerprint since the step's last other decision."""
    fingerprint = (step.get("proposal") or {}).get("input_fingerprint")
    names: list[str] = []
    for decision in step.get("decisions") or []:
        if decision.get("action") != "approve":
            names = []
            continue
        who = decision.get("reviewer")
        if decision.get("input_fingerprint") in (None, fingerprint) and who and who not in names:
            names.append(str(who))
    return names


def quorum(step: Mapping[str, Any]) -> str:
    """Who else must approve: "1 of 2 approvals (fay), waiting for finance"."""
    required = int(step.get("approvals_required") or 1)
    given = approvals_so_far(step)
    line = f"{len(given)} of {required} approval{'s' if required != 1 else ''}"
    if given:
        line += f" ({', '.join(given)})"
    group = step.get("approver_group")
    return line + (f", waiting for {group}" if group else ", from any reviewer of the team")


def form_message(call: ToolCall, step: Mapping[str, Any]) -> str:
    fingerprint = (step.get("proposal") or {}).get("input_fingerprint") or call.fingerprint
    tool = call.tool if call.tool == step.get("tool") else f"{call.tool} (recorded as {step.get('tool')})"
    return "\n".join(
        [
            "Holdpoint holds this tool call for a reviewer's approval.",
            f"Tool: {tool}",
            f"Input (the agent's, untrusted): {input_in_short(step)}",
            f"Fingerprint: sha256 {fingerprint}",
            f"Held by: {held_by(step)}",
            f"Approvals: {quorum(step)}",
            f"Step: {call.operation_ref} {step.get('url') or ''}".rstrip(),
            "Accept decides as the reviewer of this proxy's token (approve, or reject with a reason); "
            "decline rejects the call.",
        ]
    )


def _refusal(error: HoldpointError) -> str:
    title = error.problem.get("title") if isinstance(error.problem.get("title"), str) else error.code
    return f"{title}: {error.detail}" if error.detail and error.detail != title else str(title)


@dataclass
class ClientReview:
    """The proxy's reviewer: the token's user deciding, through the reviewer API, what the
    client's human answered."""

    reviewer: AsyncReviewer
    team: str
    timeout: float

    async def aclose(self) -> None:
        await self.reviewer.aclose()

    async def decide(self, ask: Ask, call: ToolCall) -> Step | None:
        """Put the held step to the client and decide what it answers. The step after a
        decision (or after another's, when ours was refused), or None when it is still held as
        it was; `call.client_review` says what happened."""
        try:
            seen = await self.reviewer.step(self.team, call.operation_ref)
        except HoldpointError as error:
            logger.warning("could not read held step %s as the reviewer: %s", call.operation_ref, error.code)
            self._note(call, "refused", f"it could not be put to you in the client ({_refusal(error)})", error.code)
            return None
        if seen.step.get("state") != "awaiting_approval":
            return None  # an escalated step is resolved, not approved: on the step page
        answer = await ask(form_message(call, seen.step), REQUESTED_SCHEMA, self.timeout)
        action = (answer or {}).get("action")
        if action not in ("accept", "decline"):
            what = "cancelled in the client" if action == "cancel" else "not answered in the client"
            self._note(call, "not_decided", f"{what}; nothing was decided")
            return None
        content = (answer or {}).get("content") or {}
        reason = content.get("reason") if isinstance(content, Mapping) else None
        reason = reason.strip()[:REASON_MAX] if isinstance(reason, str) else ""
        approve = action == "accept" and content.get("decision", "approve") != "reject"
        decision: DecisionAction = "approve" if approve else "reject"
        try:
            decided = await self.reviewer.decide(
                self.team,
                call.operation_ref,
                action=decision,
                etag=seen.etag,
                reason=reason or (APPROVED_REASON if approve else DECLINED_REASON),
            )
        except HoldpointError as error:
            logger.info("the %s of %s in the client was refused: %s", decision, call.operation_ref, error.code)
            self._note(call, "refused", f"your {decision} in the client was refused ({_refusal(error)})", error.code)
            return await self._moved(call)
        step = decided["step"]
        who = decided["decision"].get("reviewer") or "you"
        if not approve:
            self._note(call, "rejected", f"{who} rejected it in the client")
        elif step["state"] == "awaiting_approval":
            self._note(
                call, "approval_counted", f"{who} approved it in the client; it needs more: {quorum(cast(Any, step))}"
            )
        else:
            self._note(call, "approved", f"{who} approved it in the client")
        return step

    async def _moved(self, call: ToolCall) -> Step | None:
        """The step, when it left `awaiting_approval` since the form was built (a 412: another
        reviewer decided meanwhile), so that the answer is what it says now."""
        try:
            now = await self.reviewer.step(self.team, call.operation_ref)
        except HoldpointError:
            return None
        return now.step if now.step.get("state") != "awaiting_approval" else None

    @staticmethod
    def _note(call: ToolCall, outcome: str, text: str, code: str | None = None) -> None:
        call.client_review = {"outcome": outcome, "code": code, "note": f"Holdpoint: {text}."}


__all__ = ["REQUESTED_SCHEMA", "ClientReview", "form_capable", "form_message", "quorum", "session_ask"]
