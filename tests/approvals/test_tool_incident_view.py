"""A halted tool is one case: resume it, or cancel all its held steps with one decision."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client

from envelopes.models import AuditEvent, Decision, Step, Tool
from tests.approvals.conftest import approval_envelope, outage_envelope, post_envelope
from tests.conftest import AgentClient, logged_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def outage(agent: AgentClient, awaiting: Step) -> list[Step]:
    """charge_card halted by a service-wide failure, with two held steps."""
    halting = post_envelope(agent, outage_envelope(operation_ref="run_7/charge_2"))
    return [awaiting, halting]


def test_the_queue_lists_the_halted_tool_with_its_case_actions(rita: Client, outage: list[Step]) -> None:
    response = rita.get("/")

    html = response.content.decode()
    [tool] = response.context["halted_tools"]
    assert (tool.name, tool.held_steps) == ("charge_card", 2)
    assert "<code>UPSTREAM_UNAVAILABLE</code>" in html
    assert ">Resume tool</button>" in html
    assert ">Cancel all held steps</button>" in html
    assert f'id="cancel-held-{tool.pk}" class="cancel-held" hx-preserve' in html


def test_a_viewer_sees_the_halted_tool_without_actions(viewer: Any, outage: list[Step]) -> None:
    html = logged_in(viewer).get("/").content.decode()

    assert "charge_card" in html
    assert "Resume tool" not in html and "Cancel all held steps" not in html


def test_the_incident_page_shows_the_case(rita: Client, outage: list[Step]) -> None:
    response = rita.get("/tools/charge_card/incident/")

    assert response.status_code == 200
    html = response.content.decode()
    assert "Incident: <code>charge_card</code>" in html
    assert response.context["held_total"] == 2
    assert ">Resume tool</button>" in html and ">Cancel all held steps</button>" in html
    assert "<strong>halted</strong> by <code>UPSTREAM_UNAVAILABLE</code>" in html


def test_cancel_all_cancels_every_held_step_with_its_own_audit_entry(
    rita: Client, outage: list[Step]
) -> None:
    response = rita.post(
        "/tools/charge_card/cancel-held",
        {"team": "acme", "reason": "payment provider outage", "next": "/"},
    )

    assert response.status_code == 303
    assert response["Location"] == "/"
    assert [str(m) for m in get_messages(response.wsgi_request)] == ["Cancelled 2 held steps of charge_card."]
    for step in outage:
        step.refresh_from_db()
        assert (step.state, step.reason) == ("cancelled", "cancelled_by_reviewer")
        assert AuditEvent.objects.filter(step=step, kind="decision").count() == 1
        assert AuditEvent.objects.filter(step=step, kind="transition", after="cancelled").count() == 1
    assert set(Decision.objects.values_list("action", "reason")) == {("cancel", "payment provider outage")}


def test_cancel_all_needs_a_reason(rita: Client, outage: list[Step]) -> None:
    response = rita.post("/tools/charge_card/cancel-held", {"team": "acme", "reason": "  "})

    assert response.status_code == 303
    [flash] = [str(m) for m in get_messages(response.wsgi_request)]
    assert flash.startswith("A reason is required")
    assert not Decision.objects.exists()


def test_cancel_all_after_the_tool_resumed_is_already_decided(rita: Client, outage: list[Step]) -> None:
    rita.post("/tools/charge_card/resume", {"team": "acme"})

    response = rita.post("/tools/charge_card/cancel-held", {"team": "acme", "reason": "outage"})

    flash = [str(m) for m in get_messages(response.wsgi_request)]
    assert flash[-1].startswith("Already decided: charge_card is no longer halted.")
    assert not Decision.objects.exists()


def test_resume_closes_the_circuit(rita: Client, outage: list[Step]) -> None:
    response = rita.post("/tools/charge_card/resume", {"team": "acme", "reason": "provider is back"})

    assert response.status_code == 303
    assert response["Location"] == "/tools/charge_card/incident/?team=acme"
    tool = Tool.objects.get(name="charge_card")
    assert not tool.is_halted()
    resumed = AuditEvent.objects.filter(tool=tool, kind="circuit", reason="resumed").get()
    assert resumed.actor == "rita"
    for step in outage:  # held steps stay held: each is decided on its own
        step.refresh_from_db()
        assert step.held


def test_an_htmx_tool_action_redirects_the_whole_page(rita: Client, outage: list[Step]) -> None:
    response = rita.post("/tools/charge_card/resume", {"team": "acme", "next": "/"}, HTTP_HX_REQUEST="true")

    assert response.status_code == 200
    assert response["HX-Redirect"] == "/"


def test_a_viewer_cannot_resume_or_cancel(viewer: Any, outage: list[Step]) -> None:
    client = logged_in(viewer)

    assert client.post("/tools/charge_card/resume", {"team": "acme"}).status_code == 403
    assert client.post("/tools/charge_card/cancel-held", {"team": "acme", "reason": "x"}).status_code == 403
    assert Tool.objects.get(name="charge_card").is_halted()
    assert not Decision.objects.exists()


def test_another_teams_tool_is_404(outsider: Any, outage: list[Step]) -> None:
    client = logged_in(outsider)

    assert client.get("/tools/charge_card/incident/").status_code == 404
    assert client.post("/tools/charge_card/resume", {"team": "acme"}).status_code == 404
    assert client.post("/tools/charge_card/cancel-held", {"team": "acme", "reason": "x"}).status_code == 404
    assert Tool.objects.get(name="charge_card").is_halted()


def test_a_next_url_off_site_is_ignored(rita: Client, outage: list[Step]) -> None:
    response = rita.post("/tools/charge_card/resume", {"team": "acme", "next": "https://evil.example/"})

    assert response["Location"] == "/tools/charge_card/incident/?team=acme"


def test_the_same_tool_name_in_two_teams_asks_which(
    make_reviewer: Any, other_team: Any, other_agent: AgentClient, outage: list[Step]
) -> None:
    post_envelope(other_agent, approval_envelope(operation_ref="globex/1"))
    make_reviewer("bea", "reviewer")
    client = logged_in(make_reviewer("bea", "reviewer", in_team=other_team))

    html = client.get("/tools/charge_card/incident/").content.decode()

    assert "?team=acme" in html and "?team=globex" in html
    assert client.get("/tools/charge_card/incident/?team=globex").status_code == 200
