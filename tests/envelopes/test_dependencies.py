"""The core reads what the apps above it declare without importing them (issue 11, point 7).

The import directions themselves are import-linter contracts (pyproject.toml, run by
scripts/test; tests/test_import_contracts.py proves each one breaks). The step shape reads a
step's decisions through the relation the reviewer app declares on Step
(`presenters.decisions_prefetch`), not by importing that app; this keeps that read to one query.
"""

from __future__ import annotations


def test_a_page_of_steps_reads_decisions_and_proposals_in_one_query_each(
    agent, team, make_reviewer, django_assert_num_queries
) -> None:  # type: ignore[no-untyped-def]
    from approvals.services import step_decide
    from envelopes.models import Step
    from envelopes.proposal import input_fingerprint
    from tests.conftest import error_envelope
    from tests.perf.rows import door

    for index in range(3):
        ref, asked = f"op_{index}", {"n": index}
        assert (
            agent.attempt(ref, tool="send_email", fingerprint=input_fingerprint(asked), input=asked).status_code == 201
        )
        agent.envelope(
            error_envelope(
                operation_ref=ref,
                code="REFUND_ABOVE_LIMIT",
                category="authorization",
                retry={"directive": "never", "max_attempts_remaining": 0},
                next_action="request_approval",
            )
        )
    for step in Step.objects.all():
        step_decide(team=team, step_id=step.pk, actor=make_reviewer("rita"), action="approve")
    # The steps; their decisions with reviewers; their proposals; and the API's door, none with
    # the Redis cache (CI), the key's read and the throttle's upsert without it (rows.door).
    with django_assert_num_queries(3 + door()):
        response = agent.get("/api/v1/steps")
    results = response.json()["results"]
    assert [len(step["decisions"]) for step in results] == [1, 1, 1]
    assert [step["proposal"]["input"] for step in results] == [{"n": 2}, {"n": 1}, {"n": 0}]
