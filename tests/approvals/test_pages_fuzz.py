"""The pages under odd query parameters and path segments: never a 5xx, for a signed-in reviewer
or admin, whole pages and the htmx fragments alike. The routes and the parameters each view
reads are tests/odd_input.py's PAGE_ROUTES (held to the URLconf and the code by
tests/test_every_query_parameter_fuzzed.py).

What a user gets for a name that cannot be one (a NUL in it): the 404 of an unknown team or
tool, and for a search, the page saying nothing matches."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from django.db import transaction
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envelopes.models import Decision, Quarantine, Step, Tool
from tests.approvals.conftest import approval_envelope, outage_envelope, post_envelope
from tests.conftest import AgentClient, logged_in
from tests.odd_input import FRAMEWORK_ROUTES, PAGE_ROUTES, odd_query, odd_segment, odd_text, sweep
from tests.odd_input import url as odd_url

pytestmark = pytest.mark.django_db

PAGE_FUZZ = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
HTMX_TARGETS = ["step-live", "timeline-older", "queues", "tool-metrics", "step-detail", "\x00"]


@pytest.fixture
def desk(agent: AgentClient, make_reviewer: Any) -> dict[str, Any]:
    """A held step with a proposal, a halted tool with its case, a quarantined payload, and a
    reviewer and an admin signed in."""
    awaiting = post_envelope(agent, approval_envelope(operation_ref="run_7/charge_1", run_id="run_7"))
    post_envelope(agent, outage_envelope(operation_ref="run_7/charge_2"))
    body = approval_envelope(operation_ref="run_q/1")
    body["category"] = "not-a-category"
    assert agent.envelope(body).status_code == 422
    return {
        "clients": {
            "reviewer": logged_in(make_reviewer("fuzz_rita", "reviewer")),
            "admin": logged_in(make_reviewer("fuzz_ada", "admin")),
        },
        "pk": {"approvals:step": awaiting.pk, "approvals:quarantine-detail": Quarantine.objects.get().pk},
    }


def _pk_segment(valid: int) -> st.SearchStrategy[str]:
    return st.one_of(st.just(str(valid)), st.sampled_from(["0", "9" * 30, "9223372036854775808"]), odd_segment())


@PAGE_FUZZ
@pytest.mark.parametrize("name", sorted(PAGE_ROUTES))
@given(data=st.data())
def test_no_page_answers_5xx(desk: dict[str, Any], name: str, data: st.DataObject) -> None:
    route = PAGE_ROUTES[name]
    segments: dict[str, str] = {}
    if "{pk}" in route.path:
        segments["pk"] = data.draw(_pk_segment(desk["pk"][name]), label="pk")
    if "{tool}" in route.path:
        segments["tool"] = data.draw(st.one_of(st.just("charge_card"), odd_segment()), label="tool")
    if "{team}" in route.path:
        segments["team"] = data.draw(st.one_of(st.just("acme"), odd_segment()), label="team")
    query = data.draw(odd_query(route.params), label="query")
    client: Client = desk["clients"][data.draw(st.sampled_from(["reviewer", "admin"]), label="who")]
    target = data.draw(st.none() | st.sampled_from(HTMX_TARGETS), label="hx-target")
    headers = {} if target is None else {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": target}

    response = client.get(odd_url(route, segments, query), **headers)

    assert response.status_code < 500


# Views whose parameters are one form's fields (QueueFilterForm ignores each that does not parse).
ONE_FORM = {"approvals:queues", "approvals:quarantine"}


def test_each_parameter_and_segment_with_each_critical_value_answers_4xx_at_worst(desk: dict[str, Any]) -> None:
    admin = desk["clients"]["admin"]
    requests: list[tuple[str, dict[str, str]]] = []
    for name, route in PAGE_ROUTES.items():
        segments = {"tool": "charge_card"} if "{tool}" in route.path else {}
        if "{team}" in route.path:
            segments["team"] = "acme"
        if "{pk}" in route.path:
            segments["pk"] = str(desk["pk"][name])
        requests += [(url, {}) for url in sweep(route, segments, together=name in ONE_FORM)]
    # The step page's polls and "Show older" read their parameters only as htmx requests.
    step = PAGE_ROUTES["approvals:step"]
    for target in ("step-live", "timeline-older"):
        headers = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": target}
        requests += [(url, headers) for url in sweep(step, {"pk": str(desk["pk"]["approvals:step"])}, together=True)]
    faults = []
    for url, headers in requests:
        try:
            with transaction.atomic():  # a fault rolls back to here: each URL is judged on its own
                status = admin.get(url, **headers).status_code
        except Exception as fault:  # every URL is tried; the list says which failed
            faults.append((headers.get("HTTP_HX_TARGET"), url[:120], repr(fault)[:200]))
        else:
            if status >= 500:
                faults.append((headers.get("HTTP_HX_TARGET"), url[:120], status))

    assert not faults, "\n".join(map(repr, faults))


@settings(PAGE_FUZZ, max_examples=8)  # the schema is generated anew on each call
@pytest.mark.parametrize("name", sorted(FRAMEWORK_ROUTES))
@given(data=st.data())
def test_no_framework_page_answers_5xx(db: Any, name: str, data: st.DataObject) -> None:
    route = FRAMEWORK_ROUTES[name]
    response = Client().get(odd_url(route, {}, data.draw(odd_query(route.params), label="query")))

    assert response.status_code < 500


TOOL_POSTS = ["/tools/{tool}/resume", "/tools/{tool}/cancel-held", "/tools/{tool}/codes", "/tools/{tool}/settings"]


@PAGE_FUZZ
@pytest.mark.parametrize("path", TOOL_POSTS)
@given(data=st.data())
def test_no_tool_form_with_an_odd_tool_or_team_answers_5xx(
    desk: dict[str, Any], path: str, data: st.DataObject
) -> None:
    tool = data.draw(st.one_of(st.just("charge_card"), odd_segment()), label="tool")
    team = data.draw(st.one_of(st.just("acme"), odd_text()), label="team")
    form = {"team": team, "reason": data.draw(odd_text(), label="reason"), "window": data.draw(odd_text())}

    response = desk["clients"]["admin"].post(path.format(tool=tool), form)

    assert response.status_code < 500


@pytest.mark.parametrize(
    "path",
    [
        "/tools/charge_card/incident/?team=a%00",
        "/tools/charge_card/incident/?team=acme%00",
        "/tools/charge%00card/incident/",
        "/tools/charge_card%00/incident/?team=acme",
        "/tools/charge%00card/",
        "/tools/charge_card/?team=ac%00me",
    ],
)
def test_a_nul_in_a_tool_or_team_is_the_404_of_an_unknown_one(desk: dict[str, Any], path: str) -> None:
    assert desk["clients"]["reviewer"].get(path).status_code == 404


def test_the_incident_page_still_opens_for_its_team(desk: dict[str, Any]) -> None:
    assert desk["clients"]["reviewer"].get("/tools/charge_card/incident/?team=acme").status_code == 200


@pytest.mark.parametrize("query", ["a%00b", "%00", "run_7%2Fcharge_1%00"])
def test_a_search_with_a_nul_says_nothing_matches(desk: dict[str, Any], query: str) -> None:
    response = desk["clients"]["reviewer"].get(f"/search?q={query}")

    assert response.status_code == 200
    assert "No step of your teams matches" in response.content.decode()


def test_a_search_for_the_same_ref_without_the_nul_opens_the_step(desk: dict[str, Any]) -> None:
    response = desk["clients"]["reviewer"].get(f"/search?q={quote('run_7/charge_1', safe='')}")

    assert response.status_code == 302
    assert response["Location"] == f"/steps/{desk['pk']['approvals:step']}/"


@pytest.mark.parametrize("path", ["/tools/charge_card/resume", "/tools/charge_card/cancel-held"])
@pytest.mark.parametrize("slug", ["ac\x00me", "acme\x00", "\x00"])
def test_a_case_decision_for_a_team_with_a_nul_is_404_and_changes_nothing(
    desk: dict[str, Any], path: str, slug: str
) -> None:
    response = desk["clients"]["admin"].post(path, {"team": slug, "reason": "outage over"})

    assert response.status_code == 404
    assert Tool.objects.get(name="charge_card").is_halted()
    assert not Decision.objects.exists()
    assert Step.objects.filter(state="awaiting_approval").exists()
