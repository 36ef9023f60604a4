"""The reviewer API (contract §10) under odd query parameters and path segments: never a 5xx,
every error a problem+json; a crafted cursor is a 422 naming `cursor`, a team slug or ref that
cannot name one (a NUL in it) is the 404 of an unknown one, and a NUL in a decision's body is
a 422 naming the field, with nothing decided."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envelopes.models import Decision, Step
from tests.envelopes.test_fuzz_api import assert_answered_without_fault
from tests.odd_input import (
    API_FRAMEWORK_PARAMS,
    CRAFTED_CURSORS,
    REVIEWER_ROUTES,
    Route,
    odd_query,
    odd_segment,
    sweep,
)
from tests.odd_input import url as odd_url
from tests.reviewers.conftest import ReviewerClient, token_for

pytestmark = pytest.mark.django_db

QUERY_FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture
def tokens(make_reviewer: Any) -> dict[str, ReviewerClient]:
    return {role: token_for(make_reviewer(f"fuzz_{role}", role)) for role in ("viewer", "reviewer", "admin")}


@QUERY_FUZZ
@pytest.mark.parametrize("name", sorted(REVIEWER_ROUTES))
@given(data=st.data())
def test_no_query_or_path_segment_answers_5xx(
    tokens: dict[str, ReviewerClient], awaiting: Step, verifying: Step, name: str, data: st.DataObject
) -> None:
    route = REVIEWER_ROUTES[name]
    valid = {"team": "acme", "ref": quote(awaiting.operation_ref, safe="")}
    segments = {
        key: data.draw(st.one_of(st.just(value), odd_segment()), label=key)
        for key, value in valid.items()
        if "{" + key + "}" in route.path
    }
    query = data.draw(odd_query(route.params + API_FRAMEWORK_PARAMS), label="query")
    client = tokens[data.draw(st.sampled_from(sorted(tokens)), label="role")]

    assert_answered_without_fault(client.http.get(odd_url(route, segments, query)))


def test_each_parameter_and_segment_with_each_critical_value_answers_4xx_at_worst(
    rita_api: ReviewerClient, awaiting: Step
) -> None:
    valid = {"team": "acme", "ref": quote(awaiting.operation_ref, safe="")}
    faults = []
    for route in REVIEWER_ROUTES.values():
        segments = {key: value for key, value in valid.items() if "{" + key + "}" in route.path}
        for url in sweep(route, segments, API_FRAMEWORK_PARAMS):
            try:
                with transaction.atomic():  # a fault rolls back to here: each URL is judged on its own
                    assert_answered_without_fault(rita_api.http.get(url))
            except Exception as fault:
                faults.append((url[:120], repr(fault)[:200]))

    assert not faults, "\n".join(map(repr, faults))


def test_each_critical_team_or_ref_in_a_decision_answers_4xx_at_worst_and_decides_nothing(
    rita_api: ReviewerClient, awaiting: Step
) -> None:
    route = Route("/api/v1/teams/{team}/steps/{ref}/decisions", (), "reviewer")
    segments = {"team": "acme", "ref": quote(awaiting.operation_ref, safe="")}
    etag = rita_api.etag(awaiting.operation_ref)
    faults = []
    for url in sweep(route, segments):
        try:
            with transaction.atomic():  # a fault rolls back to here: each URL is judged on its own
                response = rita_api.http.generic(
                    "POST", url, json.dumps({"action": "approve"}), content_type="application/json", HTTP_IF_MATCH=etag
                )
                assert_answered_without_fault(response)
        except Exception as fault:  # every URL is tried; the list says which failed
            faults.append((url[:120], repr(fault)[:200]))

    assert not faults, "\n".join(map(repr, faults))
    assert not Decision.objects.filter(step=awaiting).exists()


@pytest.mark.parametrize("cursor", CRAFTED_CURSORS)
def test_a_crafted_cursor_on_the_queue_is_422_naming_the_cursor(
    rita_api: ReviewerClient, awaiting: Step, cursor: str
) -> None:
    response = rita_api.queue("approvals", cursor=cursor)

    assert response.status_code == 422
    assert response["Content-Type"].startswith("application/problem+json")
    assert [error["field"] for error in response.json()["errors"]] == ["cursor"]


def test_the_queue_still_pages_with_the_cursors_it_writes(rita_api: ReviewerClient, agent: Any) -> None:
    from tests.approvals.conftest import approval_envelope, post_envelope

    for n in range(3):
        post_envelope(agent, approval_envelope(operation_ref=f"run_7/charge_{n}"))
    first = rita_api.queue("approvals", limit=2).json()
    second = rita_api.http.get(first["next"]).json()

    assert [s["operation_ref"] for s in first["results"] + second["results"]] == [
        "run_7/charge_0",
        "run_7/charge_1",
        "run_7/charge_2",
    ]


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/teams/ac%00me/queue",
        "/api/v1/teams/%00/queue",
        "/api/v1/teams/ac%00me/steps/run_7%2Fcharge_1",
        "/api/v1/teams/acme/steps/run_7%00charge_1",
        "/api/v1/teams/acme/steps/%00",
    ],
)
def test_a_nul_in_the_team_or_ref_is_the_404_of_an_unknown_one(
    rita_api: ReviewerClient, awaiting: Step, path: str
) -> None:
    response = rita_api.http.get(path)

    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/problem+json")


@pytest.mark.parametrize("slug", ["ac\x00me", "acme\x00"])
def test_a_decision_for_a_team_slug_with_a_nul_is_404_and_decides_nothing(
    rita_api: ReviewerClient, awaiting: Step, slug: str
) -> None:
    etag = rita_api.etag(awaiting.operation_ref)
    rita_api.team = quote(slug, safe="")
    response = rita_api.decide(awaiting.operation_ref, {"action": "approve"}, etag=etag)

    assert response.status_code == 404
    assert not Decision.objects.filter(step=awaiting).exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "re\u0000ject", "reason": "no"}, "action"),
        ({"action": "reject", "reason": "a\u0000b"}, "reason"),
        ({"action": "approve", "input": {"to": "a\u0000b"}}, "input"),
        ({"action": "approve", "input": {"a\u0000b": 1}}, "input"),
    ],
)
def test_a_nul_in_a_decision_body_is_422_naming_the_field(
    rita_api: ReviewerClient, awaiting: Step, body: dict[str, Any], field: str
) -> None:
    response = rita_api.decide(awaiting.operation_ref, json.dumps(body), etag=rita_api.etag(awaiting.operation_ref))

    assert response.status_code == 422, response.content
    assert field in [error["field"].split(".")[0] for error in response.json().get("errors", [{"field": field}])]
    assert not Decision.objects.filter(step=awaiting).exists()
