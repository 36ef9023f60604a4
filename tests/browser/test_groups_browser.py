"""Who decides, in two real browsers (contract §12): an admin puts fay in finance on the groups
page (htmx); fay, in finance, approves a finance step; rita, outside it, sees it read-only; a
request escalated to the on-call group is approved there."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import expect

from accounts.groups import group_create, group_member_add
from accounts.models import Team
from envelopes.configuration import tool_configure
from envelopes.models import Step
from envelopes.tasks import sweep_due_steps
from tests.approvals.conftest import approval_envelope, post_envelope
from tests.browser.conftest import Watched, log_in
from tests.conftest import AgentClient

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

OpenPage = Callable[..., Watched]


def test_finance_approves_and_everyone_else_sees_the_step_read_only(
    open_page: OpenPage, make_reviewer: Any, team: Team, agent: AgentClient
) -> None:
    for name, role in (("ada", "admin"), ("fay", "reviewer"), ("rita", "reviewer")):
        make_reviewer(name, role)
    group_create(team=team, name="finance")
    tool_configure(team=team, name="charge_card", settings={"approver_group": "finance"}, actor="test")
    step = post_envelope(agent, approval_envelope(operation_ref="run_7/wire_20000"))

    admin = open_page().page
    log_in(admin, "ada")
    admin.goto("/")
    admin.get_by_role("link", name="API keys").click()  # the team's admin page links its groups
    admin.get_by_role("link", name=f"the reviewer groups of {team.slug}").click()
    expect(admin).to_have_url(re.compile(rf"/teams/{team.slug}/groups/$"))
    admin.get_by_label("Username").fill("fay")
    admin.get_by_role("button", name="Add").click()
    expect(admin.locator("#groups")).to_contain_text("fay is in finance.")

    rita = open_page().page  # her own context: her own session
    log_in(rita, "rita")
    rita.goto(f"/steps/{step.pk}/")
    expect(rita.locator("#held-for")).to_contain_text("for finance")
    expect(rita.locator("#held-for")).to_contain_text("Only finance may approve or reject this step")
    expect(rita.get_by_role("button", name="Approve")).to_have_count(0)

    fay = open_page().page
    log_in(fay, "fay")
    fay.goto(f"/steps/{step.pk}/")
    expect(fay.locator("#held-for")).to_contain_text("for finance")
    fay.get_by_role("button", name="Approve", exact=True).click()
    expect(fay.locator("#decision-feedback")).to_be_visible()
    step.refresh_from_db()
    assert Step.objects.get(pk=step.pk).state == "retry_ready"
    reviewer = step.decisions.get().reviewer
    assert reviewer is not None and reviewer.username == "fay"


def test_a_request_escalated_to_the_on_call_group_is_approved_there(
    open_page: OpenPage, make_reviewer: Any, team: Team, agent: AgentClient
) -> None:
    group_member_add(team=team, name="finance", user=make_reviewer("fay", "reviewer"))
    group_member_add(team=team, name="on-call", user=make_reviewer("lena", "reviewer"))
    tool_configure(
        team=team,
        name="charge_card",
        settings={"approver_group": "finance", "escalate_after_s": 1, "escalate_to": "on-call"},
        actor="test",
    )
    step = post_envelope(agent, approval_envelope(operation_ref="run_8/wire_20000"))

    lena = open_page().page
    log_in(lena, "lena")
    lena.goto(f"/steps/{step.pk}/")
    expect(lena.locator("#held-for")).to_contain_text("Only finance may approve or reject this step")
    expect(lena.get_by_role("button", name="Approve", exact=True)).to_have_count(0)

    time.sleep(1.1)  # finance did not answer within escalate_after_s; beat's sweep runs
    assert sweep_due_steps() == 1
    lena.reload()
    expect(lena.locator("#escalated-to")).to_have_text("escalated to on-call")
    lena.get_by_label("Reason").fill("On call: the supplier confirmed by phone.")
    lena.get_by_role("button", name="Approve", exact=True).click()
    expect(lena.locator("#decision-feedback")).to_contain_text("Approved.")
    step.refresh_from_db()
    assert (step.state, step.decisions.get().reviewer.username) == ("retry_ready", "lena")  # type: ignore[union-attr]
