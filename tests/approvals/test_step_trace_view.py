"""The step page shows the agent's trace id (contract §13), a link through HOLDPOINT_TRACE_URL."""

from __future__ import annotations

import pytest
from django.test import Client

from envelopes.models import Step
from tests.approvals.conftest import approval_envelope, post_envelope
from tests.conftest import AgentClient

pytestmark = pytest.mark.django_db

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = {"HTTP_TRACEPARENT": f"00-{TRACE}-00f067aa0ba902b7-01"}


def post_traced(agent: AgentClient) -> Step:
    response = agent.envelope(approval_envelope(), **TRACEPARENT)
    assert response.status_code == 201, response.content
    return Step.objects.get(envelopes__pk=response.json()["envelope_id"])


def test_it_shows_the_trace_id_without_a_link_by_default(rita: Client, agent: AgentClient) -> None:
    step = post_traced(agent)

    html = rita.get(f"/steps/{step.pk}/").content.decode()

    assert f'<code id="trace-id">{TRACE}</code>' in html
    assert 'id="trace-link"' not in html
    assert f'data-copy="{TRACE}"' in html


def test_it_links_the_trace_through_the_trace_url(rita: Client, agent: AgentClient, settings) -> None:  # type: ignore[no-untyped-def]
    settings.HOLDPOINT_TRACE_URL = 'https://tempo.example/explore?trace={trace_id}&a=1&b="x"'
    step = post_traced(agent)

    html = rita.get(f"/steps/{step.pk}/").content.decode()

    # The id replaced, the URL escaped as an attribute value.
    assert f'href="https://tempo.example/explore?trace={TRACE}&amp;a=1&amp;b=&quot;x&quot;"' in html
    assert 'id="trace-link"' in html


def test_a_trace_url_that_is_not_http_is_not_linked(rita: Client, agent: AgentClient, settings) -> None:  # type: ignore[no-untyped-def]
    settings.HOLDPOINT_TRACE_URL = "javascript:alert('{trace_id}')"
    step = post_traced(agent)

    html = rita.get(f"/steps/{step.pk}/").content.decode()

    assert 'id="trace-link"' not in html and "javascript:" not in html
    assert f'<code id="trace-id">{TRACE}</code>' in html


def test_a_step_without_a_trace_says_so(rita: Client, agent: AgentClient) -> None:
    step = post_envelope(agent, approval_envelope())

    html = rita.get(f"/steps/{step.pk}/").content.decode()

    assert "<dt>Trace</dt>" in html and 'id="trace-id"' not in html
