"""The team seal (envelopes/audit.py): every committed link ends up under a seal, even one that
commits after a link with a higher id, and a rewritten link is caught by the seal."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from accounts.models import Team
from envelopes.audit import SEAL_SETTLE, _event_fields, _link_hash, audit_append, audit_seal, audit_verify
from envelopes.models import AuditEvent, AuditSeal, Step
from tests.conftest import AgentClient, error_envelope


def two_steps(agent: AgentClient) -> tuple[Step, Step]:
    for ref in ("late/1", "early/2"):
        assert agent.envelope(error_envelope(operation_ref=ref)).status_code == 201
    return Step.objects.get(operation_ref="late/1"), Step.objects.get(operation_ref="early/2")


def append_link(step_id: int, note: str) -> AuditEvent:
    """One more link on the step's chain, as every service writes it: under the row lock."""
    step = Step.objects.select_for_update().get(pk=step_id)
    event = audit_append(
        holder=step, kind=AuditEvent.Kind.REFUSAL, actor="test", before=step.state, after=step.state, reason=note
    )
    step.save(update_fields=["audit_seq", "audit_head"])
    return event


def sealed_heads(team: Team) -> dict[str, list[object]]:
    heads: dict[str, list[object]] = {}
    for seal in AuditSeal.objects.filter(team=team).order_by("seq"):
        heads.update(seal.heads)
    return heads


def rewrite(event: AuditEvent) -> None:
    """Tamper the careful way: change a link, recompute its hash and its holder's head, so that
    the chain alone still checks out and only the seal can tell."""
    event.refresh_from_db()
    event.reason = "rewritten"
    event.hash = _link_hash(event.prev_hash, _event_fields(event))
    AuditEvent.objects.filter(pk=event.pk).update(reason=event.reason, hash=event.hash)
    Step.objects.filter(pk=event.step_id).update(audit_head=event.hash)


def assert_rewrite_is_caught(event: AuditEvent) -> None:
    rewrite(event)
    problems = [str(problem) for problem in audit_verify()]
    assert problems
    assert all(f"step:{event.step_id}#{event.seq} no longer matches its seal" in p for p in problems)


@pytest.mark.django_db
def test_a_link_that_appears_after_a_seal_saw_a_higher_id_is_sealed_next_time(agent: AgentClient, team: Team) -> None:
    late, early = two_steps(agent)
    audit_seal(team=team)
    with transaction.atomic():
        hidden = append_link(late.pk, "late")  # the lower id ...
        visible = append_link(early.pk, "early")  # ... and a higher one
    assert hidden.pk < visible.pk
    # Replay the commit order of two concurrent transactions: at the seal, only the higher id
    # is visible; the lower one commits afterwards with the id it was given.
    hidden_row = AuditEvent.objects.filter(pk=hidden.pk)
    saved = hidden_row.values()[0]
    hidden_row.delete()
    first = audit_seal(team=team)
    assert first is not None and first.through_event_id == visible.pk
    assert f"step:{late.pk}" not in first.heads
    AuditEvent.objects.create(**saved)

    second = audit_seal(team=team)

    assert second is not None
    assert second.heads == {f"step:{late.pk}": [hidden.seq, hidden.hash]}
    assert sealed_heads(team)[f"step:{early.pk}"] == [visible.seq, visible.hash]
    assert audit_verify() == []
    assert_rewrite_is_caught(hidden)


@pytest.mark.django_db
def test_a_chain_already_sealed_at_its_head_is_not_sealed_again(agent: AgentClient, team: Team) -> None:
    late, _ = two_steps(agent)
    assert audit_seal(team=team) is not None

    assert audit_seal(team=team) is None

    with transaction.atomic():
        moved = append_link(late.pk, "moved")
    third = audit_seal(team=team)
    assert third is not None and third.heads == {f"step:{late.pk}": [moved.seq, moved.hash]}


@pytest.mark.django_db
def test_seals_made_minutes_apart_each_record_only_the_chains_that_moved(agent: AgentClient, team: Team) -> None:
    late, early = two_steps(agent)
    first = audit_seal(team=team)
    assert first is not None
    later = timezone.now() + SEAL_SETTLE + timedelta(seconds=1)
    with transaction.atomic():
        moved = append_link(late.pk, "moved")

    second = audit_seal(team=team, now=later)

    assert second is not None and set(second.heads) == {f"step:{late.pk}"}
    with transaction.atomic():
        append_link(early.pk, "moved too")
    third = audit_seal(team=team, now=later + SEAL_SETTLE + timedelta(seconds=1))
    assert third is not None and set(third.heads) == {f"step:{early.pk}"}
    assert moved.pk > first.through_event_id
    assert audit_verify() == []


@pytest.mark.django_db(transaction=True)
def test_two_transactions_that_commit_out_of_id_order_are_both_sealed(agent: AgentClient, team: Team) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("SQLite lets one writer in at a time: ids there always commit in order")
    late, early = two_steps(agent)
    audit_seal(team=team)
    written, release, done = threading.Event(), threading.Event(), threading.Event()
    links: dict[str, AuditEvent] = {}

    def slow_transaction() -> None:
        try:
            with transaction.atomic():
                links["late"] = append_link(late.pk, "late")
                written.set()
                assert release.wait(30)
        finally:
            connection.close()
            done.set()

    thread = threading.Thread(target=slow_transaction)
    thread.start()
    try:
        assert written.wait(30)
        with transaction.atomic():
            links["early"] = append_link(early.pk, "early")  # a higher id, committed first
        assert links["late"].pk < links["early"].pk
        between = audit_seal(team=team)
        assert between is not None and set(between.heads) == {f"step:{early.pk}"}
    finally:
        release.set()
        thread.join(30)
    assert done.is_set()

    after = audit_seal(team=team)

    assert after is not None and after.heads == {f"step:{late.pk}": [links["late"].seq, links["late"].hash]}
    assert audit_verify() == []
    assert_rewrite_is_caught(links["late"])


@pytest.mark.django_db(transaction=True)
def test_a_rewritten_link_committed_first_is_caught_too(agent: AgentClient, team: Team) -> None:
    _, early = two_steps(agent)
    with transaction.atomic():
        link = append_link(early.pk, "early")
    audit_seal(team=team)
    assert audit_verify() == []

    assert_rewrite_is_caught(link)
