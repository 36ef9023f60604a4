"""What a notification says, and how each kind of channel says it (contract §9).

`content_build` turns a channel's notices into one neutral Content: the team, counts by event,
the first ten steps (tool, code, reason, operation_ref, correlation_id, age, expiry,
safe_details, a short form of the proposal, the step's link) and "and N more", and the halted
tools. Renderers then write it as email (text and HTML, autoescaped), Slack Block Kit (built
with slack_sdk's block models; agent text only ever in plain_text objects, with Slack's three
reserved characters escaped, so `<!channel>` or `*bold*` reaches Slack as text) or the JSON of
a signed webhook. Everything here comes from stored, redacted data: no secret, and no link that
decides anything (the only link is the step page)."""

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

from envelopes.presenters import rfc3339, step_representation

from .models import Notice

DIGEST_STEPS = 10
PROPOSAL_CHARS = 300
SAFE_DETAIL_CHARS = 200
SLACK_MAX_BLOCKS = 50

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
    step_id: int | None = None
    etag: str = ""  # the step's ETag when the message was built (§10's Approve decides with it)

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
        step_id=notice.step.pk,
        etag=f'"{notice.step.pk}.{notice.step.version}"',
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
    return bool(getattr(settings, "SLACK_SIGNING_SECRET", ""))


def approve_reject(*, team: str, step_id: int, operation_ref: str, etag: str, url: str) -> ActionsBlock:
    """`Approve` posts back to /integrations/slack/actions (Slack signs it; it decides with the
    ETag the message was built with); `Reject` only opens the step page (a reason is needed)."""
    value = json.dumps({"team": team, "operation_ref": operation_ref, "etag": etag}, separators=(",", ":"))
    return ActionsBlock(
        block_id=f"holdpoint-step-{step_id}",
        elements=[
            ButtonElement(text="Approve", action_id="holdpoint.approve", value=value, style="primary"),
            ButtonElement(text="Reject", action_id="holdpoint.reject", url=url),
        ],
    )


def _actions(team: str, facts: StepFacts) -> ActionsBlock:
    assert facts.step_id is not None
    return approve_reject(
        team=team, step_id=facts.step_id, operation_ref=facts.operation_ref, etag=facts.etag, url=facts.url
    )


def _step_blocks(facts: StepFacts, team: str = "") -> list[Block]:
    lines = [
        f"{facts.title}: {facts.tool}" + (f" ({facts.code})" if facts.code else ""),
        f"operation_ref: {facts.operation_ref}",
        f"correlation_id: {facts.correlation_id or '-'}",
        f"reason: {facts.reason}   age: {facts.age}   expires: {facts.expires_at or '-'}",
    ]
    if facts.escalated_from:
        lines.append(f"escalated from: {facts.escalated_from}")
    if facts.safe_details:
        lines.append("safe_details: " + ", ".join(f"{k}={v}" for k, v in facts.safe_details.items()))
    if facts.proposal:
        lines.append(f"proposal: {facts.proposal}")
    blocks: list[Block] = [
        SectionBlock(text=_plain("\n".join(lines), 3000)),
        # Ours alone: the step page's URL (HOLDPOINT_BASE_URL), which decides nothing.
        ContextBlock(elements=[MarkdownTextObject(text=f"<{slack_escape(facts.url)}|Open the step page>")]),
    ]
    if facts.state == "awaiting_approval" and facts.step_id is not None and slack_actions_enabled():
        blocks.append(_actions(team, facts))
    return blocks


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
    for facts in content.steps:
        blocks.append(DividerBlock())
        blocks.extend(_step_blocks(facts, content.team))
    if content.more:
        blocks.append(SectionBlock(text=_plain(f"and {content.more} more")))
    blocks.append(
        ContextBlock(elements=[MarkdownTextObject(text=f"<{slack_escape(content.queue_url)}|Open the queues>")])
    )
    if len(blocks) > SLACK_MAX_BLOCKS:  # Slack refuses more; the queues link stays last
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
