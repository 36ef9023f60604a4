"""Auto-registration of tools is capped per team (HOLDPOINT_MAX_TOOLS_PER_TEAM, default 500):
an envelope or attempt naming a new tool beyond the cap is a 422 problem naming `tool`, and
nothing of it is stored."""

from __future__ import annotations

import pytest

from accounts.models import Team
from envelopes.configuration import tool_configure
from envelopes.errors import ToolLimitReached
from envelopes.models import Envelope, Quarantine, Step, Tool
from envelopes.step_context import tool_auto_register
from tests.conftest import error_envelope, fingerprint
from tests.envelopes.test_concurrency import run_together
from tests.settings_file import settings_with_environment_unset

FP = fingerprint("input")


def refused_for_the_limit(response) -> dict:
    assert response.status_code == 422, response.content
    assert response["Content-Type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["code"] == "tool_limit_reached"
    assert problem["errors"] == [{"field": "tool", "rule": "tool_limit"}]
    return problem


@pytest.fixture
def two_tools_at_most(settings, agent) -> None:
    settings.HOLDPOINT_MAX_TOOLS_PER_TEAM = 2
    assert agent.envelope(error_envelope(tool="send_email", operation_ref="a")).status_code == 201
    assert agent.attempt("b", tool="create_invoice", fingerprint=FP).status_code == 201


@pytest.mark.django_db
def test_an_envelope_naming_a_new_tool_beyond_the_cap_is_refused_and_nothing_is_stored(
    agent, two_tools_at_most
) -> None:
    counts = (Envelope.objects.count(), Step.objects.count())
    problem = refused_for_the_limit(agent.envelope(error_envelope(tool="invented_tool_3", operation_ref="c")))
    assert "2 tools" in problem["detail"]
    assert not Tool.objects.filter(name="invented_tool_3").exists()
    assert (Envelope.objects.count(), Step.objects.count()) == counts
    assert not Quarantine.objects.exists()


@pytest.mark.django_db
def test_a_malformed_envelope_naming_a_new_tool_beyond_the_cap_is_not_quarantined(agent, two_tools_at_most) -> None:
    refused_for_the_limit(agent.envelope({"ok": False, "tool": "invented_tool_3", "operation_ref": "c"}))
    assert not Quarantine.objects.exists()
    assert not Step.objects.filter(operation_ref="c").exists()


@pytest.mark.django_db
def test_an_attempt_naming_a_new_tool_beyond_the_cap_is_refused_and_makes_no_step(agent, two_tools_at_most) -> None:
    refused_for_the_limit(agent.attempt("c", tool="invented_tool_3", fingerprint=FP))
    assert not Step.objects.filter(operation_ref="c").exists()
    assert Tool.objects.count() == 2


@pytest.mark.django_db
def test_the_registered_tools_keep_working_at_the_cap(agent, two_tools_at_most) -> None:
    assert agent.envelope(error_envelope(tool="send_email", operation_ref="d")).status_code == 201
    assert agent.attempt("e", tool="create_invoice", fingerprint=FP).status_code == 201


@pytest.mark.django_db
def test_the_cap_is_per_team_and_an_admin_may_still_configure_a_tool(
    agent, other_agent, team, two_tools_at_most
) -> None:
    assert other_agent.envelope(error_envelope(tool="invented_tool_3")).status_code == 201
    tool_configure(team=team, name="invented_tool_3", settings={"max_attempts": 5}, actor="admin")
    assert agent.envelope(error_envelope(tool="invented_tool_3", operation_ref="c")).status_code == 201


@pytest.mark.django_db
def test_the_default_cap_is_500_tools(settings, agent, team: Team) -> None:
    default = settings_with_environment_unset("HOLDPOINT_MAX_TOOLS_PER_TEAM")["HOLDPOINT_MAX_TOOLS_PER_TEAM"]
    assert default == 500
    settings.HOLDPOINT_MAX_TOOLS_PER_TEAM = default
    Tool.objects.bulk_create(Tool(team=team, name=f"tool_{n}") for n in range(499))
    assert agent.envelope(error_envelope(tool="tool_499", operation_ref="last")).status_code == 201
    refused_for_the_limit(agent.envelope(error_envelope(tool="tool_500", operation_ref="beyond")))
    assert Tool.objects.filter(team=team).count() == 500


@pytest.mark.django_db(transaction=True)
def test_racing_registrations_of_new_tools_never_pass_the_cap(settings, team: Team) -> None:
    # At the service, without the HTTP stack spreading the threads out: without the team's
    # row lock, 20 threads register 8 to 12 tools here.
    settings.HOLDPOINT_MAX_TOOLS_PER_TEAM = 3

    def register(n: int) -> str:
        try:
            tool_auto_register(team=team, name=f"tool_{n}")
        except ToolLimitReached:
            return "refused"
        return "registered"

    results = run_together([lambda n=n: register(n) for n in range(20)])
    assert sorted(results) == ["refused"] * 17 + ["registered"] * 3
    assert Tool.objects.filter(team=team).count() == 3
