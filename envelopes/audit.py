"""The audit log's hash chains: one per step (or tool), sealed periodically per team."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.db import transaction
from django.db.models import CharField, Max, OuterRef, Q, Subquery, Value
from django.db.models.functions import Cast, Concat
from django.utils import timezone

from accounts.models import Team

from . import modelsql
from .models import AuditEvent, AuditSeal, Step, Tool

GENESIS = "0" * 64


class ChainHolder(Protocol):
    """A chain's head kept by an app above the core (the rules app's team policy chain): links
    of no step and no tool."""

    team_id: int
    audit_seq: int
    audit_head: str

    @property
    def audit_chain(self) -> str: ...


def _link_hash(prev_hash: str, fields: dict[str, Any]) -> str:
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{prev_hash}|{canonical}".encode()).hexdigest()


def _event_fields(event: AuditEvent) -> dict[str, Any]:
    return {
        "team": event.team_id,
        "chain": event.chain,
        "seq": event.seq,
        "step": event.step_id,
        "tool": event.tool_id,
        "kind": event.kind,
        "actor": event.actor,
        "before": event.before,
        "after": event.after,
        "reason": event.reason,
        "held_seconds": None if event.held_seconds is None else round(event.held_seconds, 6),
        "data": event.data,
        "created_at": event.created_at.isoformat(),
    }


def audit_append(
    *,
    holder: Step | Tool | ChainHolder,
    kind: str,
    actor: str,
    before: str = "",
    after: str = "",
    reason: str = "",
    held_seconds: float | None = None,
    data: dict[str, Any] | None = None,
    now: datetime | None = None,
) -> AuditEvent:
    """Append one link to the holder's chain. The caller holds the holder's row lock and saves
    `audit_seq` / `audit_head`, which this function advances on the instance."""
    event = audit_link(
        holder=holder,
        kind=kind,
        actor=actor,
        before=before,
        after=after,
        reason=reason,
        held_seconds=held_seconds,
        data=data,
        now=now,
    )
    event.save(force_insert=True)
    return event


def audit_link(
    *,
    holder: Step | Tool | ChainHolder,
    kind: str,
    actor: str,
    before: str = "",
    after: str = "",
    reason: str = "",
    held_seconds: float | None = None,
    data: dict[str, Any] | None = None,
    now: datetime | None = None,
) -> AuditEvent:
    """The next link of the holder's chain, hashed, not saved yet (`audit_append` saves it; the
    core's writer, transitions.plan_write, writes it with the rows of the same change). Advances the
    holder's `audit_seq` / `audit_head`."""
    chain: str
    step_id: int | None
    tool_id: int | None
    if isinstance(holder, Step):
        chain, step_id, tool_id = f"step:{holder.pk}", holder.pk, holder.tool_id
    elif isinstance(holder, Tool):
        chain, step_id, tool_id = f"tool:{holder.pk}", None, holder.pk
    else:
        chain, step_id, tool_id = holder.audit_chain, None, None
    event = modelsql.new(
        AuditEvent,
        team_id=holder.team_id,
        chain=chain,
        seq=holder.audit_seq + 1,
        step_id=step_id,
        tool_id=tool_id,
        kind=kind,
        actor=actor,
        before=before,
        after=after,
        reason=reason,
        held_seconds=None if held_seconds is None else round(held_seconds, 6),
        data=data or {},
        created_at=now or timezone.now(),
        prev_hash=holder.audit_head or GENESIS,
    )
    event.hash = _link_hash(event.prev_hash, _event_fields(event))
    holder.audit_seq = event.seq
    holder.audit_head = event.hash
    return event


def _seal_fields(seal: AuditSeal) -> dict[str, Any]:
    return {
        "team": seal.team_id,
        "seq": seal.seq,
        "heads": seal.heads,
        "through": seal.through_event_id,
        "created_at": seal.created_at.isoformat(),
    }


def _seal_hash(seal: AuditSeal) -> str:
    return _link_hash(seal.prev_hash, _seal_fields(seal))


# How long a link may take from its INSERT to its COMMIT and still be sealed. Ids are handed
# out at INSERT, so on PostgreSQL a link can become visible after a link with a higher id: a
# seal that went on from the last id it saw would skip it for good. Each seal therefore looks
# again at every link written since the last seal older than this delay, and records the chain
# heads that are not sealed yet. Transactions here last milliseconds (a web worker is killed,
# and its transaction rolled back, after 30 s); beat seals every minute, so a link committed
# within SEAL_SETTLE minus a minute of its INSERT is always sealed.
SEAL_SETTLE = timedelta(minutes=5)


@transaction.atomic
def audit_seal(*, team: Team, now: datetime | None = None) -> AuditSeal | None:
    """Record the head of every chain that moved and is not sealed at that head yet."""
    now = now or timezone.now()
    # Serialise sealers per team on the team row.
    Team.objects.select_for_update().get(pk=team.pk)
    seals = AuditSeal.objects.filter(team=team)
    last = seals.order_by("-seq").first()
    settled = seals.filter(created_at__lte=now - SEAL_SETTLE).order_by("-seq").first()
    # Heads the seals since `settled` recorded: a chain still at one of them needs no new seal.
    sealed: dict[str, list[Any]] = {}
    for recent in seals.filter(seq__gt=settled.seq if settled else 0).order_by("seq").only("heads"):
        sealed.update(recent.heads)
    return _seal_write(
        team=team, last=last, since_id=settled.through_event_id if settled else 0, sealed=sealed, now=now
    )


def _seal_write(
    *, team: Team, last: AuditSeal | None, since_id: int, sealed: dict[str, list[Any]], now: datetime
) -> AuditSeal | None:
    moved = (
        AuditEvent.objects.filter(team=team, id__gt=since_id)
        .values("chain")
        .annotate(last_id=Max("id"), last_seq=Max("seq"))
        .order_by()
    )
    rows = list(moved)
    if not rows:
        return None
    # A chain's head is its link with the highest seq, not the highest id: the links of one write
    # (a decision and its transition) go in one statement, whose parts PostgreSQL runs in no set
    # order. Looked up by (chain, seq), through audit_unique_link.
    links: dict[tuple[str, int], str] = {}
    for start in range(0, len(rows), HEADS_PER_QUERY):
        match = Q(pk__in=[])
        for row in rows[start : start + HEADS_PER_QUERY]:
            match |= Q(chain=row["chain"], seq=row["last_seq"])
        links.update(
            {(chain, seq): link_hash for chain, seq, link_hash in AuditEvent.objects.filter(match).values_list(
                "chain", "seq", "hash"
            )}
        )  # fmt: skip
    heads = {}
    for row in rows:
        head = [row["last_seq"], links[(row["chain"], row["last_seq"])]]
        if sealed.get(row["chain"]) != head:
            heads[row["chain"]] = head
    if not heads:
        return None
    seal = AuditSeal(
        team=team,
        seq=(last.seq + 1) if last else 1,
        heads=heads,
        through_event_id=max([row["last_id"] for row in rows] + [last.through_event_id if last else 0]),
        created_at=now,
        prev_hash=last.hash if last else GENESIS,
    )
    seal.hash = _seal_hash(seal)
    seal.save(force_insert=True)
    return seal


@dataclass(frozen=True)
class AuditProblem:
    where: str
    problem: str

    def __str__(self) -> str:
        return f"{self.where}: {self.problem}"


def audit_verify() -> list[AuditProblem]:
    """Recompute every chain and seal; an edited, deleted or rewritten link is a problem, and so
    is a step row that says what its chain does not (`steps_against_chains`).

    Memory stays flat however long the log: links, steps and seals are read a batch at a time
    in key order (keyset pages, so no server-side cursor is needed, as behind PgBouncer), only
    the chain being read is remembered, and a seal's heads are looked up by (chain, seq)."""
    return [*_links_problems(), *_tool_heads_problems(), *steps_against_chains(), *_seals_problems()]


BATCH = 2000


def _links_problems() -> Iterator[AuditProblem]:
    chain, expected_prev, expected_seq = "", GENESIS, 1
    links = AuditEvent.objects.order_by("chain", "seq")
    page = links
    while True:
        batch = list(page[:BATCH])
        for event in batch:
            if event.chain != chain:
                chain, expected_prev, expected_seq = event.chain, GENESIS, 1
            if event.seq != expected_seq:
                yield AuditProblem(f"{chain}#{event.seq}", f"link {expected_seq} is missing")
            if event.prev_hash != expected_prev:
                yield AuditProblem(f"{chain}#{event.seq}", "does not follow the previous link")
            if _link_hash(event.prev_hash, _event_fields(event)) != event.hash:
                yield AuditProblem(f"{chain}#{event.seq}", "was altered after it was written")
            expected_prev, expected_seq = event.hash, event.seq + 1
        if len(batch) < BATCH:
            return
        last = batch[-1]
        # The chain's bound alone lets the scan of (chain, seq) start there; the rest is exact.
        page = links.filter(chain__gte=last.chain).filter(Q(chain__gt=last.chain) | Q(seq__gt=last.seq))


def _tool_heads_problems() -> Iterator[AuditProblem]:
    """Each tool's head (audit_seq, audit_head) against its chain's last link (steps': in
    steps_against_chains)."""
    last = AuditEvent.objects.filter(chain=Concat(Value("tool:"), Cast(OuterRef("pk"), CharField()))).order_by("-seq")
    tools = Tool.objects.order_by("pk").annotate(
        chain_seq=Subquery(last.values("seq")[:1]), chain_hash=Subquery(last.values("hash")[:1])
    )
    for pk, seq, head, chain_seq, chain_hash in tools.values_list(
        "pk", "audit_seq", "audit_head", "chain_seq", "chain_hash"
    ).iterator(chunk_size=BATCH):
        if (seq or chain_seq) and (seq, head) != (chain_seq, chain_hash):
            yield AuditProblem(f"tool:{pk}", "its head does not match its last link")


def _seals_problems() -> Iterator[AuditProblem]:
    """Each team's seal chain, and every head a seal recorded against the link it names."""
    seals_prev: dict[int, str] = {}  # per team
    page = AuditSeal.objects.order_by("team_id", "seq")
    while True:
        batch = list(page[: SEALS_BATCH])
        wanted: list[tuple[str, str, int, str]] = []  # (where, chain, seq, hash)
        for seal in batch:
            where = f"seal team:{seal.team_id}#{seal.seq}"
            if seal.prev_hash != seals_prev.get(seal.team_id, GENESIS) or _seal_hash(seal) != seal.hash:
                yield AuditProblem(where, "the seal chain was altered")
            seals_prev[seal.team_id] = seal.hash
            wanted += [(where, chain, seq, link_hash) for chain, (seq, link_hash) in seal.heads.items()]
        for start in range(0, len(wanted), HEADS_PER_QUERY):
            heads = wanted[start : start + HEADS_PER_QUERY]
            match = Q(pk__in=[])
            for _, chain, seq, _ in heads:
                match |= Q(chain=chain, seq=seq)
            found = {
                (chain, seq): link_hash
                for chain, seq, link_hash in AuditEvent.objects.filter(match).values_list("chain", "seq", "hash")
            }
            for where, chain, seq, link_hash in heads:
                if found.get((chain, seq)) != link_hash:
                    yield AuditProblem(where, f"{chain}#{seq} no longer matches its seal")
        if len(batch) < SEALS_BATCH:
            return
        last = batch[-1]
        page = (
            AuditSeal.objects.order_by("team_id", "seq")
            .filter(team_id__gte=last.team_id)
            .filter(Q(team_id__gt=last.team_id) | Q(seq__gt=last.seq))
        )


SEALS_BATCH = 200  # a seal may record thousands of heads
HEADS_PER_QUERY = 200  # (chain, seq) pairs looked up in one statement, through audit_unique_link


STEPS_BATCH = 2000


def steps_against_chains(*, batch: int = STEPS_BATCH) -> Iterator[AuditProblem]:
    """Each step row against its own chain: a row edited behind the services' back (an UPDATE that
    releases a held step) keeps a valid chain, so only this comparison sees it.

    Every change of a step's state or reason appends a transition link carrying both (refusals
    and decisions append links too, with the state unchanged and their own code as `reason`):
    the state must be the `after` of the chain's last link, the reason that of its last
    transition; and its head (audit_seq, audit_head) must be that last link. A step with no link
    at all was not written by the services. Steps are read in key order a batch at a time
    (keyset, so memory stays flat without a server-side cursor), each with its last link and
    last transition found through audit_step_seq_idx: one query per batch."""
    links = AuditEvent.objects.filter(step=OuterRef("pk")).order_by("-seq")
    after = 0
    while True:
        rows = list(
            Step.objects.filter(pk__gt=after)
            .order_by("pk")
            .annotate(
                chain_seq=Subquery(links.values("seq")[:1]),
                chain_hash=Subquery(links.values("hash")[:1]),
                chain_state=Subquery(links.values("after")[:1]),
                chain_reason=Subquery(links.filter(kind=AuditEvent.Kind.TRANSITION).values("reason")[:1]),
            )
            .values_list(
                "pk",
                "audit_seq",
                "audit_head",
                "chain_seq",
                "chain_hash",
                "team__slug",
                "operation_ref",
                "state",
                "reason",
                "chain_state",
                "chain_reason",
            )[:batch]
        )
        for pk, seq, head, chain_seq, chain_hash, team, ref, state, reason, chain_state, chain_reason in rows:
            if (seq or chain_seq) and (seq, head) != (chain_seq, chain_hash):
                yield AuditProblem(f"step:{pk}", "its head does not match its last link")
            where = f"step:{pk} (team {team}, operation_ref {ref!r})"
            if chain_state is None:
                yield AuditProblem(where, f"its row says {state} ({reason}) but its chain has no link")
            elif (state, reason) != (chain_state, chain_reason):
                yield AuditProblem(
                    where,
                    f"its row says {state} ({reason}) but its chain's last link says {chain_state} ({chain_reason})",
                )
        if len(rows) < batch:
            return
        after = rows[-1][0]
