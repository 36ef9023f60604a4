"""The step page in Chromium shows the agent's trace id (contract §13): a link to the team's
tracing tool (HOLDPOINT_TRACE_URL, `{trace_id}` replaced), with its copy button."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import expect

from envelopes.models import Step
from tests.approvals.conftest import approval_envelope
from tests.browser.conftest import Watched, log_in
from tests.conftest import AgentClient

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_the_step_page_links_the_agents_trace(
    open_page: Callable[..., Watched], make_reviewer: Any, agent: AgentClient, settings: Any
) -> None:
    settings.HOLDPOINT_TRACE_URL = "https://tempo.example/explore?traceId={trace_id}&from=holdpoint"
    make_reviewer("rita", "reviewer")
    answer = agent.envelope(approval_envelope(), HTTP_TRACEPARENT=f"00-{TRACE}-00f067aa0ba902b7-01")
    assert answer.status_code == 201, answer.content
    step = Step.objects.get()
    page = open_page().page
    log_in(page, "rita")

    page.goto(f"/steps/{step.pk}/")

    link = page.get_by_role("link", name=TRACE)
    expect(link).to_be_visible()
    expect(link).to_have_attribute("href", f"https://tempo.example/explore?traceId={TRACE}&from=holdpoint")
    expect(page.get_by_role("button", name="Copy trace id")).to_be_visible()
