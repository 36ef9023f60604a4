"""Every link a team admin can follow in the dashboard answers a page: starting at `/`, each
page's same-site links are followed (the API, the admin, static files and logout aside)."""

from __future__ import annotations

import re
from collections import deque
from html import unescape
from urllib.parse import urljoin, urlsplit

import pytest

from accounts.models import Team
from envelopes.services import envelope_quarantine
from tests.approvals.conftest import approval_envelope, outage_envelope, post_envelope
from tests.conftest import AgentClient, error_envelope, logged_in, unknown_outcome

pytestmark = pytest.mark.django_db

HREF = re.compile(r'href="([^"]+)"')
NOT_FOLLOWED = ("/api/", "/admin/", "/static/", "/accounts/logout", "/metrics")


def test_every_dashboard_link_answers_200(make_reviewer, agent: AgentClient, team: Team) -> None:  # type: ignore[no-untyped-def]
    post_envelope(agent, approval_envelope(operation_ref="run_7/charge_1", run_id="run_7"))
    post_envelope(agent, unknown_outcome(tool="create_invoice", operation_ref="run_7/invoice_2", run_id="run_7"))
    post_envelope(agent, error_envelope(operation_ref="run_7/email_3", code="UNDOCUMENTED_THING"))
    post_envelope(agent, outage_envelope(operation_ref="run_7/charge_9"))
    for n in range(51):
        envelope_quarantine(
            team=team,
            tool_name="send_email",
            operation_ref=f"run_q/{n}",
            code="malformed_json",
            errors=[],
            raw_body=b"{",
        )
    admin = logged_in(make_reviewer("ada", "admin"))

    seen: set[str] = set()
    queue = deque(["/"])
    while queue and len(seen) < 400:
        path = queue.popleft()
        if path in seen:
            continue
        seen.add(path)
        response = admin.get(path)
        assert response.status_code == 200, f"{path} answered {response.status_code}"
        for href in HREF.findall(response.content.decode()):
            target = urljoin(path, unescape(href))
            parts = urlsplit(target)
            if parts.scheme or parts.netloc or parts.path.startswith(NOT_FOLLOWED):
                continue
            followed = parts.path + (f"?{parts.query}" if parts.query else "")
            if followed not in seen:
                queue.append(followed)
    followed_pages = {urlsplit(path).path for path in seen}
    # The crawl reached every kind of page.
    for expected in ("/", "/search", "/quarantine/", "/overview/", "/keys/", "/webhooks/"):
        assert expected in followed_pages, expected
    assert any(re.fullmatch(r"/steps/\d+/", path) for path in followed_pages)
    assert any(re.fullmatch(r"/quarantine/\d+/", path) for path in followed_pages)
    assert any(re.fullmatch(r"/tools/[a-z_]+/", path) for path in followed_pages)
    assert any(re.fullmatch(r"/tools/[a-z_]+/incident/", path) for path in followed_pages)
    assert "/quarantine/?page=2" in seen  # the pager (a "??page=2" would not be)
    assert len(seen) > 20, sorted(seen)
