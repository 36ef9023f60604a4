"""`python manage.py verify_audit` compares each step row with its own chain: an UPDATE made
behind the services' back (releasing a held step) leaves every hash valid, and is still found."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.db import connection

from accounts.models import Team
from approvals.services import step_decide
from envelopes.audit import steps_against_chains
from envelopes.configuration import tool_configure
from envelopes.models import AuditEvent, Step
from tests import worker
from tests.approvals.conftest import approval_envelope, post_envelope
from tests.conftest import AgentClient, error_envelope, fingerprint, success_envelope

pytestmark = pytest.mark.django_db(transaction=True)


def verify_audit(*args: str) -> subprocess.CompletedProcess[str]:
    """The command in a fresh process on the test database, as an operator runs it."""
    env = {**os.environ, "DATABASE_URL": worker.test_database_url(), "DJANGO_SETTINGS_MODULE": "config.settings"}
    return subprocess.run(
        [sys.executable, "manage.py", "verify_audit", *args],
        cwd=worker.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def history(agent: AgentClient, team: Team, make_reviewer) -> Step:  # type: ignore[no-untyped-def]
    """Steps whose chains end in each kind of link: a transition, a refusal, a decision that
    was not final yet (the first of two approvals), and a closed step."""
    tool_configure(team=team, name="charge_card", settings={"required_approvals": 2}, actor="test")
    agent.envelope(error_envelope(operation_ref="closed/1"))
    agent.envelope(success_envelope(operation_ref="closed/1"))
    agent.attempt("refused/1", tool="charge_card", fingerprint=fingerprint("a"))
    post_envelope(agent, approval_envelope(operation_ref="refused/1"))
    assert agent.attempt("refused/1", tool="charge_card", fingerprint=fingerprint("a")).status_code == 409
    agent.attempt("held/1", tool="charge_card", fingerprint=fingerprint("b"))
    held = post_envelope(agent, approval_envelope(operation_ref="held/1"))
    step_decide(
        team=team,
        step_id=held.pk,
        actor=make_reviewer("alice"),
        action="approve",
        reason="one of two",
        expected_state="awaiting_approval",
        expected_since=held.state_entered_at,
    )
    held.refresh_from_db()
    assert held.state == "awaiting_approval"
    last_kinds = {
        step.operation_ref: AuditEvent.objects.filter(step=step).order_by("-seq").first().kind  # type: ignore[union-attr]
        for step in Step.objects.all()
    }
    assert last_kinds == {"closed/1": "transition", "refused/1": "refusal", "held/1": "decision"}
    return held


def test_a_clean_database_passes(history: Step) -> None:
    done = verify_audit("--seal")

    assert done.returncode == 0, done.stderr
    assert "intact" in done.stdout


def test_an_update_that_releases_a_held_step_is_named_and_exits_non_zero(history: Step) -> None:
    assert verify_audit("--seal").returncode == 0
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE envelopes_step SET state = 'retry_ready', reason = 'approved' WHERE id = %s", [history.pk]
        )

    done = verify_audit()

    assert done.returncode != 0
    assert f"step:{history.pk} (team acme, operation_ref 'held/1')" in done.stderr
    assert "its row says retry_ready (approved) but its chain's last link says awaiting_approval" in done.stderr
    assert "tampered: 1 problem(s)" in done.stderr  # the other steps are not named


def test_a_changed_reason_alone_is_found(history: Step) -> None:
    Step.objects.filter(operation_ref="closed/1").update(reason="verified_committed")

    done = verify_audit()

    assert done.returncode != 0
    assert "operation_ref 'closed/1'" in done.stderr
    assert "succeeded (verified_committed)" in done.stderr


def test_a_step_inserted_without_any_link_is_found(history: Step) -> None:
    Step.objects.create(
        team=history.team, tool=history.tool, operation_ref="forged/1", state="retry_ready", reason="approved"
    )

    done = verify_audit()

    assert done.returncode != 0
    assert "operation_ref 'forged/1'" in done.stderr
    assert "its chain has no link" in done.stderr


def test_an_operation_ref_is_shown_escaped(history: Step) -> None:
    # A forged row need not obey the API's rules for refs: the report must not carry its bytes.
    Step.objects.create(
        team=history.team, tool=history.tool, operation_ref="run/\u001b[2Jstep", state="retry_ready", reason="x"
    )

    done = verify_audit()

    assert done.returncode != 0
    assert "\x1b" not in done.stderr
    assert "operation_ref 'run/\\x1b[2Jstep'" in done.stderr


def test_steps_are_read_a_batch_at_a_time_however_many_there_are(agent: AgentClient, django_assert_num_queries) -> None:  # type: ignore[no-untyped-def]
    for n in range(5):
        agent.envelope(error_envelope(operation_ref=f"run/{n}"))
    Step.objects.filter(operation_ref="run/4").update(state="retry_ready")

    with django_assert_num_queries(3):  # 2 + 2 + 1 steps
        problems = list(steps_against_chains(batch=2))

    assert [problem.where.split(" ")[0] for problem in problems] == [
        f"step:{Step.objects.get(operation_ref='run/4').pk}"
    ]


def test_small_batches_find_the_same_problems_as_one(
    history: Step, team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Links, steps and seals are read in keyset pages: a chain or a seal split across pages is
    checked as a whole."""
    from envelopes import audit

    audit.audit_seal(team=team)
    assert audit.audit_verify() == []
    monkeypatch.setattr(audit, "BATCH", 2)
    monkeypatch.setattr(audit, "SEALS_BATCH", 1)
    monkeypatch.setattr(audit, "HEADS_PER_QUERY", 2)
    assert audit.audit_verify() == []

    middle = AuditEvent.objects.filter(step=history).order_by("seq")[1]  # not the head: seq 2 of 3
    AuditEvent.objects.filter(pk=middle.pk).delete()
    tool = history.tool
    type(tool).objects.filter(pk=tool.pk).update(audit_head="0" * 64)
    closed = AuditEvent.objects.filter(step__operation_ref="closed/1").order_by("-seq").first()
    assert closed is not None
    AuditEvent.objects.filter(pk=closed.pk).update(hash="f" * 64)  # a sealed head

    problems = [str(problem) for problem in audit.audit_verify()]

    assert f"step:{history.pk}#{middle.seq + 1}: link {middle.seq} is missing" in problems
    assert f"tool:{tool.pk}: its head does not match its last link" in problems
    assert any(p.endswith(f"step:{closed.step_id}#{closed.seq} no longer matches its seal") for p in problems)
