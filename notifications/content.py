"""What a notification says, and how each kind of channel says it (contract §9).

`content_build` turns a channel's notices into one neutral Content: the team, counts by event,
the first ten steps (tool, code, reason, operation_ref, correlation_id, age, expiry,
safe_details, a short form of the proposal, the step's link) and "and N more", and the halted
tools. Renderers then write it as email (text and HTML, autoescaped), Slack Block Kit (built
with slack_sdk's block models; agent text only ever in plain_text objects, with Slack's three
reserved characters escaped, so `<!channel>` or `*bold*` reaches Slack as text) or the JSON of
a signed webhook. Slack shows the proposal whole when it fits a section, and offers Approve only
then (`slack_proposal`); email and webhooks, which decide nothing, keep the short form.
Everything here comes from stored, redacted data: no secret, and no link that decides anything
(the only link is the step page)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.template.loader import render_to_string
from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from approvals.explain import policy_explained
from envelopes.presenters import step_representation
from envelopes.rfc3339 import rfc3339

from .models import Notice
from .slack_buttons import approve_value, fingerprint_shown

DIGEST_STEPS = 10
PROPOSAL_CHARS = 300
# Slack: a section's text is at most 3000 characters. The proposal has a section of its own: a
# heading line (well under 200) and the input, shown whole only up to this many characters once
# escaped, else cut to PROPOSAL_CHARS and offered without Approve.
SLACK_PROPOSAL_CHARS = 2800
SAFE_DETAIL_CHARS = 200
SLACK_MAX_BLOCKS = 50
# Slack also refuses a message whose blocks are too long in all (`msg_blocks_too_long`, well
# below its documented 40,000 characters): a message's blocks stay within this much JSON.
SLACK_MAX_BLOCKS_JSON = 12_000

TITLES = {
    "approval.requested": "Approval requested",
    "verification.requested": "Verification needed",
    "step.escalated": "Step escalated",
    "tool.halted": "Tool halted",
    "step.overdue": "Still waiting",
    "approval.expiring": "Approval expiring",
}


def age_text(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{hours // 24} d {hours % 24} h"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def proposal_short(step: dict[str, Any]) -> str | None:
    """The proposal's input as compact JSON, clipped (it is stored redacted), or None."""
    proposal = step.get("proposal")
    if not isinstance(proposal, dict):
        return None
    if proposal.get("input") is None:
        return "the agent sent no input"
    text = json.dumps(proposal["input"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return _clip(text, PROPOSAL_CHARS)


@dataclass(frozen=True)
class ProposalFacts:
    """The proposal as a message may show it: the stored (redacted) input and its fingerprint."""

    input: dict[str, Any] | None  # None: the agent sent no input
    fingerprint: str
    redacted: bool  # `input_redacted`, or a `[REDACTED:` value anywhere in it
    edited: bool  # a reviewer's edit of the agent's input, under review


def _holds_redaction(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and "[REDACTED:" in item:
            return True
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def proposal_facts(step: dict[str, Any]) -> ProposalFacts | None:
    """The proposal of a step in the §4 shape (`step_representation`), or None when it has none."""
    proposal = step.get("proposal")
    if not isinstance(proposal, dict):
        return None
    value = proposal.get("input")
    value = value if isinstance(value, dict) else None
    fingerprint = str(proposal.get("input_fingerprint") or "")
    edited = any(
        decision.get("action") == "approve"
        and decision.get("edited")
        and decision.get("input_fingerprint") == fingerprint
        for decision in step.get("decisions") or []
    )
    return ProposalFacts(
        input=value,
        fingerprint=fingerprint,
        redacted=bool(proposal.get("input_redacted")) or (value is not None and _holds_redaction(value)),
        edited=edited,
    )


@dataclass(frozen=True)
class StepFacts:
    event: str
    title: str
    tool: str
    state: str
    reason: str
    code: str
    operation_ref: str
    correlation_id: str
    age: str
    age_seconds: int
    expires_at: str | None
    safe_details: dict[str, Any]
    proposal: str | None
    url: str
    escalated_from: str | None = None
    escalated_to: str | None = None  # the group a request for approval widened to (contract §12)
    step_id: int | None = None
    etag: str = ""  # the step's ETag when the message was built (§10's Approve decides with it)
    proposal_facts: ProposalFacts | None = None  # the whole proposal, for Slack's Approve
    policy: str | None = None  # which rule or grant held, refused or approved it (§11), in words
    similar_url: str | None = None  # the step page's "Approve and allow similar" form, when offered

    def as_dict(self) -> dict[str, Any]:
        return {
            "event": self.event,
            "tool": self.tool,
            "state": self.state,
            "reason": self.reason,
            "code": self.code or None,
            "operation_ref": self.operation_ref,
            "correlation_id": self.correlation_id or None,
            "age_seconds": self.age_seconds,
            "expires_at": self.expires_at,
            "safe_details": self.safe_details,
            "proposal": self.proposal,
            "url": self.url,
            "escalated_from": self.escalated_from,
            "escalated_to": self.escalated_to,
            "policy": self.policy,
        }


@dataclass(frozen=True)
class HaltFacts:
    tool: str
    reason: str
    until: str | None
    held_steps: int
    url: str

    def as_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "reason": self.reason, "until": self.until, "held_steps": self.held_steps}


@dataclass(frozen=True)
class Content:
    team: str
    kind: str  # an event when it holds one, "digest" when several, "test"
    counts: dict[str, int]
    steps: list[StepFacts] = field(default_factory=list)
    more: int = 0
    halts: list[HaltFacts] = field(default_factory=list)

    @property
    def title(self) -> str:
        if self.kind == "test":
            return "Test notification"
        if self.kind == "digest":
            total = sum(self.counts.values())
            return f"{total} notifications"
        return TITLES.get(self.kind, self.kind)

    @property
    def subject(self) -> str:
        if self.kind == "test":
            return f"[Holdpoint {self.team}] Test notification"
        if self.kind == "digest":
            counts = ", ".join(f"{n} {TITLES.get(event, event).lower()}" for event, n in self.counts.items())
            return f"[Holdpoint {self.team}] {counts}"
        if self.halts:
            return f"[Holdpoint {self.team}] Tool halted: {self.halts[0].tool}"
        facts = self.steps[0]
        return f"[Holdpoint {self.team}] {facts.title}: {facts.tool} {facts.code or facts.reason}".strip()

    @property
    def queue_url(self) -> str:
        return base_url() + "/"


def base_url() -> str:
    return str(settings.HOLDPOINT_BASE_URL).rstrip("/")


def step_facts(notice: Notice, *, now: datetime) -> StepFacts:
    """The step as it is now (still in the held entry the notice announces), redacted as
    stored."""
    assert notice.step is not None
    step = step_representation(notice.step)
    envelope = step.get("last_envelope") or {}
    details = {
        str(key): (_clip(value, SAFE_DETAIL_CHARS) if isinstance(value, str) else value)
        for key, value in (envelope.get("safe_details") or {}).items()
    }
    entered = notice.entered_at or notice.created_at
    seconds = int((now - entered).total_seconds())
    return StepFacts(
        event=notice.event,
        title=TITLES.get(notice.event, notice.event),
        tool=str(step.get("tool") or notice.tool),
        state=str(step.get("state") or ""),
        reason=str(step.get("reason") or ""),
        code=str(envelope.get("code") or ""),
        operation_ref=str(step.get("operation_ref") or ""),
        correlation_id=str(step.get("correlation_id") or ""),
        age=age_text(seconds),
        age_seconds=max(0, seconds),
        expires_at=step.get("deadline"),
        safe_details=details,
        proposal=proposal_short(step),
        # The step page, from HOLDPOINT_BASE_URL now (not the URL stored with the event).
        url=f"{base_url()}/steps/{notice.step_id}/",
        escalated_from=notice.escalated_from.label if notice.escalated_from_id and notice.escalated_from else None,
        escalated_to=(notice.data or {}).get("escalated_to") or None,
        step_id=notice.step.pk,
        etag=f'"{notice.step.pk}.{notice.step.version}"',
        proposal_facts=proposal_facts(step),
        policy=policy_explained(step.get("policy"), reason=str(step.get("reason") or "")),
        # §11: grants are never offered where two or more approvals are needed.
        similar_url=(
            f"{base_url()}/steps/{notice.step_id}/#grant-when"
            if notice.step.state == "awaiting_approval" and notice.step.approvals_required < 2
            else None
        ),
    )


def content_build(*, team: str, notices: list[Notice], now: datetime, held: dict[str, int] | None = None) -> Content:
    """One message's content: `notices` are live, in order; `held` counts the held steps of
    each halted tool (its message speaks for them)."""
    counts = Counter(notice.event for notice in notices)
    steps = [notice for notice in notices if notice.step_id is not None]
    halts = [
        HaltFacts(
            tool=str(notice.data.get("tool") or notice.tool),
            reason=str(notice.data.get("reason") or ""),
            until=notice.data.get("until"),
            held_steps=(held or {}).get(notice.tool, 0),
            url=f"{base_url()}/tools/{notice.tool}/",
        )
        for notice in notices
        if notice.step_id is None
    ]
    kind = notices[0].event if len(counts) == 1 and len(notices) == 1 else "digest"
    return Content(
        team=team,
        kind=kind,
        counts=dict(counts),
        steps=[step_facts(notice, now=now) for notice in steps[:DIGEST_STEPS]],
        more=max(0, len(steps) - DIGEST_STEPS),
        halts=halts,
    )


def test_content(*, team: str) -> Content:
    return Content(team=team, kind="test", counts={})


# --- email ---------------------------------------------------------------------------------------


def render_email(content: Content) -> tuple[str, str, str]:
    """Subject, plain text and HTML (Django templates, autoescaped: agent text stays text)."""
    context = {"content": content, "titles": TITLES}
    text = render_to_string("notifications/email.txt", context)
    html = render_to_string("notifications/email.html", context)
    subject = " ".join(content.subject.split())[:250]  # one line, whatever a tool is named
    return subject, text, html


# --- Slack ---------------------------------------------------------------------------------------


def slack_escape(text: str) -> str:
    """Slack's three reserved characters, escaped as it documents (so `<!channel>` and
    `<@U123>` are no mention and no link)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _plain(text: str, limit: int = 2000) -> PlainTextObject:
    # plain_text: never parsed as mrkdwn (no *bold*, no mentions); emoji off (no :shortcodes:).
    return PlainTextObject(text=_clip(slack_escape(text), limit), emoji=False)


def slack_actions_enabled() -> bool:
    """§10: with SLACK_SIGNING_SECRET set, Slack's button clicks come back signed and decide."""
    return bool(settings.SLACK_SIGNING_SECRET)


def _u_escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def visible_json(value: Any, *, indent: int | None) -> str:
    """The input as JSON in which every character can be seen: json.dumps escapes control
    characters, and this also escapes, as JSON `\\u` escapes (the same JSON value), what prints
    as nothing or as something else: bidi overrides, zero-width and odd spaces, line separators."""
    separators = (",", ": ") if indent is not None else (",", ":")
    text = json.dumps(value, indent=indent, sort_keys=True, ensure_ascii=False, separators=separators)
    # Outside strings json.dumps writes only printable characters and the indent's newlines;
    # inside them it escapes every newline, so a kept "\n" is never the agent's.
    return "".join(char if char.isprintable() or char == "\n" else _u_escape(char) for char in text)


@dataclass(frozen=True)
class SlackProposal:
    """The proposal's section in a Slack message, and whether Approve may go with it."""

    text: str  # not yet escaped for Slack (`_plain` escapes it)
    approvable: bool  # the whole input is shown, it was sent and nothing in it is redacted
    fingerprint: str


def slack_proposal(facts: ProposalFacts | None, *, awaiting: bool) -> SlackProposal:
    """Approve approves only what the message shows: the input whole (pretty, else compact, if
    it fits SLACK_PROPOSAL_CHARS once escaped), sent, and not redacted. Anything else is shown
    as far as it goes, and the message says that the decision is on the step page."""
    on_page = "; decide on the step page" if awaiting else ""
    if facts is None or facts.input is None:
        return SlackProposal(text=f"proposal: the agent sent no input{on_page}", approvable=False, fingerprint="")
    whole = next(
        (
            text
            for text in (visible_json(facts.input, indent=2), visible_json(facts.input, indent=None))
            if len(slack_escape(text)) <= SLACK_PROPOSAL_CHARS
        ),
        None,
    )
    what = "a reviewer's edit of the agent's input" if facts.edited else "the agent's input"
    named = f"proposal ({what}, fingerprint {fingerprint_shown(facts.fingerprint)})"
    if whole is None:
        compact = visible_json(facts.input, indent=None)
        return SlackProposal(
            text=(
                f"{named}, cut: {len(compact)} characters, more than a Slack message shows whole; the"
                f" step page shows it all{' and decides on it' if awaiting else ''}:\n{_clip(compact, PROPOSAL_CHARS)}"
            ),
            approvable=False,
            fingerprint=facts.fingerprint,
        )
    if facts.redacted:
        return SlackProposal(
            text=f"{named}, redacted: part of it is hidden{on_page}:\n{whole}",
            approvable=False,
            fingerprint=facts.fingerprint,
        )
    tail = ", shown whole: Approve approves exactly this input" if awaiting else ", shown whole"
    return SlackProposal(text=f"{named}{tail}:\n{whole}", approvable=True, fingerprint=facts.fingerprint)


def step_buttons(
    *,
    team: str,
    step_id: int,
    operation_ref: str,
    etag: str,
    url: str,
    proposal: SlackProposal,
    similar_url: str | None = None,
) -> ActionsBlock:
    """With the whole proposal shown: `Approve` posts back to /integrations/slack/actions with a
    value Holdpoint signed for this step, ETag and fingerprint (slack_buttons), `Reject` opens
    the step page (a reason is needed) and, where §11 offers it, `Approve and allow similar…`
    opens the step page's grant form (its condition is read in words there before saving).
    Otherwise no Approve, and no Reject either (it would only open the same page). `Open the
    step page` in both cases, a link that decides nothing."""
    page = ButtonElement(text="Open the step page", action_id="holdpoint.open", url=url)
    if not proposal.approvable:
        return ActionsBlock(block_id=f"holdpoint-step-{step_id}", elements=[page])
    value = approve_value(team=team, operation_ref=operation_ref, etag=etag, fingerprint=proposal.fingerprint)
    similar = (
        [ButtonElement(text="Approve and allow similar…", action_id="holdpoint.similar", url=similar_url)]
        if similar_url
        else []
    )
    return ActionsBlock(
        block_id=f"holdpoint-step-{step_id}",
        elements=[
            ButtonElement(text="Approve", action_id="holdpoint.approve", value=value, style="primary"),
            ButtonElement(text="Reject", action_id="holdpoint.reject", url=url),
            *similar,
            page,
        ],
    )


def step_decision_blocks(
    *,
    team: str,
    step_id: int | None,
    state: str,
    operation_ref: str,
    etag: str,
    url: str,
    proposal: ProposalFacts | None,
    similar_url: str | None = None,
) -> list[Block]:
    """The proposal's section and, for a step awaiting approval with §10 configured, its buttons:
    the message a notification sends and the one a first of two approvals leaves behind."""
    awaiting = state == "awaiting_approval" and step_id is not None and slack_actions_enabled()
    shown = slack_proposal(proposal, awaiting=awaiting)
    blocks: list[Block] = [SectionBlock(text=_plain(shown.text, 3000))]
    if awaiting:
        assert step_id is not None
        blocks.append(
            step_buttons(
                team=team,
                step_id=step_id,
                operation_ref=operation_ref,
                etag=etag,
                url=url,
                proposal=shown,
                similar_url=similar_url,
            )
        )
    return blocks


def _step_blocks(facts: StepFacts, team: str = "") -> list[Block]:
    lines = [
        f"{facts.title}: {facts.tool}" + (f" ({facts.code})" if facts.code else ""),
        f"operation_ref: {facts.operation_ref}",
        f"correlation_id: {facts.correlation_id or '-'}",
        f"reason: {facts.reason}   age: {facts.age}   expires: {facts.expires_at or '-'}",
    ]
    if facts.policy:
        lines.append(f"policy: {facts.policy}")
    if facts.escalated_from:
        lines.append(f"escalated from: {facts.escalated_from}")
    if facts.escalated_to:
        lines.append(f"escalated to: {facts.escalated_to} (its members may decide it now)")
    if facts.safe_details:
        lines.append("safe_details: " + ", ".join(f"{k}={v}" for k, v in facts.safe_details.items()))
    proposal, *buttons = step_decision_blocks(
        team=team,
        step_id=facts.step_id,
        state=facts.state,
        operation_ref=facts.operation_ref,
        etag=facts.etag,
        url=facts.url,
        proposal=facts.proposal_facts,
        similar_url=facts.similar_url,
    )
    # Ours alone: the step page's URL (HOLDPOINT_BASE_URL), which decides nothing; a button
    # when the step has buttons, else a link.
    page = ContextBlock(elements=[MarkdownTextObject(text=f"<{slack_escape(facts.url)}|Open the step page>")])
    return [SectionBlock(text=_plain("\n".join(lines), 3000)), proposal, *(buttons or [page])]


def _json_size(block: Block) -> int:
    return len(json.dumps(block.to_dict(), separators=(",", ":"), ensure_ascii=False))


def render_slack(content: Content) -> dict[str, Any]:
    """An incoming-webhook body: `text` (the notification's fallback) and Block Kit `blocks`."""
    blocks: list[Block] = [HeaderBlock(text=_plain(f"Holdpoint {content.team}: {content.title}", 150))]
    if content.kind == "test":
        blocks.append(SectionBlock(text=_plain("This channel works: Holdpoint can reach it.")))
    if content.kind == "digest":
        counts = ", ".join(f"{n} × {TITLES.get(event, event)}" for event, n in content.counts.items())
        blocks.append(SectionBlock(text=_plain(counts)))
    for halt in content.halts:
        text = f"Tool halted: {halt.tool} ({halt.reason}), until {halt.until or '-'}"
        if halt.held_steps:
            text += f"; {halt.held_steps} held step(s) of this tool wait for a reviewer"
        blocks.append(SectionBlock(text=_plain(text)))
        blocks.append(
            ContextBlock(elements=[MarkdownTextObject(text=f"<{slack_escape(halt.url)}|Open the tool page>")])
        )
    more = content.more
    size = sum(_json_size(block) for block in blocks)
    footer = 2 * _json_size(SectionBlock(text=_plain(f"and {DIGEST_STEPS} more")))  # and the queues link
    for index, facts in enumerate(content.steps):
        step = [DividerBlock(), *_step_blocks(facts, content.team)]
        step_size = sum(_json_size(block) for block in step)
        # Within Slack's limits, a step is shown with all its blocks or counted in "and N more",
        # so no step's buttons ever go without its proposal.
        later = len(content.steps) - index - 1 + more
        if index and (
            len(blocks) + len(step) + (1 if later else 0) + 1 > SLACK_MAX_BLOCKS
            or size + step_size + footer > SLACK_MAX_BLOCKS_JSON
        ):
            more += len(content.steps) - index
            break
        blocks.extend(step)
        size += step_size
    if more:
        blocks.append(SectionBlock(text=_plain(f"and {more} more")))
    blocks.append(
        ContextBlock(elements=[MarkdownTextObject(text=f"<{slack_escape(content.queue_url)}|Open the queues>")])
    )
    if len(blocks) > SLACK_MAX_BLOCKS:  # many halted tools: the queues link stays last
        blocks = blocks[: SLACK_MAX_BLOCKS - 1] + blocks[-1:]
    return {
        "text": slack_escape(f"Holdpoint {content.team}: {content.title}"),
        "blocks": [block.to_dict() for block in blocks],
    }


# --- webhook -------------------------------------------------------------------------------------


def render_webhook(content: Content, *, now: datetime) -> str:
    """`{type, timestamp, data}` as §5, for a webhook channel."""
    kind = {"digest": "notification.digest", "test": "notification.test"}.get(content.kind, content.kind)
    body = {
        "type": kind,
        "timestamp": rfc3339(now),
        "data": {
            "team": content.team,
            "counts": content.counts,
            "steps": [facts.as_dict() for facts in content.steps],
            "more": content.more,
            "halts": [halt.as_dict() for halt in content.halts],
        },
    }
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)
