"""The quarantine: payloads that broke the contract, listed per team and shown escaped."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from approvals import queries
from envelopes.models import Quarantine
from envelopes.services import envelope_quarantine
from tests.approvals.conftest import approval_envelope
from tests.conftest import AgentClient, logged_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def quarantined(agent: AgentClient) -> Quarantine:
    body = approval_envelope(operation_ref="run_q/1", agent_message="<script>alert(1)</script>")
    body["category"] = "not-a-category"
    response = agent.envelope(body)
    assert response.status_code == 422
    return Quarantine.objects.get()


def test_the_list_shows_the_payload_and_the_rule(rita: Client, quarantined: Quarantine) -> None:
    html = rita.get("/quarantine/").content.decode()

    assert f'href="/quarantine/{quarantined.pk}/"' in html
    assert f"<code>{quarantined.code}</code>" in html
    assert "run_q/1" in html


def test_the_queue_page_lists_recent_quarantine(rita: Client, quarantined: Quarantine) -> None:
    html = rita.get("/").content.decode()

    assert f'href="/quarantine/{quarantined.pk}/"' in html
    assert "No payload was quarantined." not in html


def test_the_detail_shows_the_body_escaped_and_untrusted(rita: Client, quarantined: Quarantine) -> None:
    html = rita.get(f"/quarantine/{quarantined.pk}/").content.decode()

    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert '<div class="untrusted" hx-disable>' in html
    assert "<code>category</code>" in html


def test_another_teams_quarantine_is_404(
    make_reviewer: Any, other_team: Any, quarantined: Quarantine
) -> None:
    otto = logged_in(make_reviewer("otto", "reviewer", in_team=other_team))

    assert otto.get(f"/quarantine/{quarantined.pk}/").status_code == 404
    assert "run_q/1" not in otto.get("/quarantine/").content.decode()


def test_the_quarantine_filters_by_tool(rita: Client, quarantined: Quarantine) -> None:
    assert "run_q/1" in rita.get("/quarantine/?tool=charge_card").content.decode()
    assert "run_q/1" not in rita.get("/quarantine/?tool=send_email").content.decode()


def test_a_long_quarantine_is_paged_fifty_at_a_time(rita: Client, team) -> None:  # type: ignore[no-untyped-def]
    for n in range(51):
        envelope_quarantine(
            team=team, tool_name=None, operation_ref=None, code="malformed_json", errors=[], raw_body=b"{" * (n + 1)
        )
    first = rita.get("/quarantine/").content.decode()
    assert len(re.findall(r'href="/quarantine/\d+/"', first)) == 50
    assert 'href="?page=2">Older</a>' in first and "page 1 of 2" in first
    second = rita.get("/quarantine/", {"page": 2}).content.decode()
    assert len(re.findall(r'href="/quarantine/\d+/"', second)) == 1
    assert 'href="?page=1">Newer</a>' in second


def test_the_quarantine_pages_only_through_the_latest_thousand(rita: Client, team, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(queries, "COUNT_CAP", 60)
    for n in range(61):
        envelope_quarantine(
            team=team, tool_name=None, operation_ref=None, code="malformed_json", errors=[], raw_body=b"{" * (n + 1)
        )
    html = rita.get("/quarantine/").content.decode()
    assert 'Quarantine <span class="count">60+</span>' in html and "page 1 of 2" in html
    assert len(re.findall(r'href="/quarantine/\d+/"', rita.get("/quarantine/", {"page": 2}).content.decode())) == 10
