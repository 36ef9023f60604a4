"""The step page's timeline: the latest 50 events, older ones a page at a time (with htmx or as
a plain link), a poll that sends nothing while nothing changed, and reads that do not grow with
the step's history."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import Team
from approvals.services import step_decide
from approvals.timeline import PAGE_SIZE, Cursor
from envelopes import services
from envelopes.models import AuditEvent, Envelope, Step
from tests.approvals.conftest import approval_envelope, htmx_headers, post_envelope
from tests.conftest import AgentClient, error_envelope, success_envelope
from webhooks.models import DeliveryTry, OutboxMessage, WebhookEndpoint

pytestmark = pytest.mark.django_db

ENTRY = re.compile(r'<li class="tl tl-([a-z]+)">')
OLDER = re.compile(r'<li id="timeline-older" class="tl tl-older"><a href="([^"#]+)#h-timeline"')


def busy_step(team: Team, events: int, ref: str = "busy/1") -> Step:
    """A closed step whose timeline holds exactly `events` entries: its first error, the
    success that closed it, then envelopes that arrived after it closed (stored, shown, no
    transition), one second apart."""
    start = timezone.now() - timedelta(hours=2)
    ingest(team, error_envelope(operation_ref=ref), start)
    ingest(team, success_envelope(operation_ref=ref), start + timedelta(seconds=1))
    step = Step.objects.get(operation_ref=ref)
    so_far = timeline_size(step)
    for n in range(events - so_far):
        ingest(team, success_envelope(operation_ref=ref, correlation_id=f"late-{n}"), start + timedelta(seconds=2 + n))
    assert timeline_size(step) == events
    return step


def ingest(team: Team, body: dict[str, Any], now: Any) -> None:
    services.envelope_ingest(team=team, payload=body, dialect="canonical", raw_body=json.dumps(body).encode(), now=now)


def timeline_size(step: Step) -> int:
    return step.envelopes.count() + step.attempt_set.count() + AuditEvent.objects.filter(step=step).count()


def entries(html: str) -> list[str]:
    return ENTRY.findall(html)


def correlation_ids(html: str) -> list[str]:
    return re.findall(r"correlation id <code>([^<]+)</code>", html)


def older_link(html: str) -> str | None:
    match = OLDER.search(html)
    return match.group(1) if match else None


def test_a_step_with_200_events_shows_the_latest_50_and_pages_back_to_the_first(rita: Client, team: Team) -> None:
    step = busy_step(team, 200)

    first = rita.get(f"/steps/{step.pk}/").content.decode()

    assert len(entries(first)) == PAGE_SIZE
    assert correlation_ids(first)[-1] == "late-195"  # the newest, at the bottom (oldest first)
    seen = correlation_ids(first)
    link = older_link(first)
    pages = 1
    while link:
        html = rita.get(link).content.decode()
        assert "Back to the latest events" in html
        assert 'hx-trigger="every 5s"' not in html  # a page of history does not poll
        page_ids = correlation_ids(html)
        seen = page_ids + seen
        link = older_link(html)
        pages += 1
    assert pages == 4
    assert len(entries(html)) == PAGE_SIZE
    # Every envelope exactly once, in the order they arrived.
    expected = list(step.envelopes.order_by("received_at", "id").values_list("correlation_id", flat=True))
    assert seen == expected


def test_show_older_with_htmx_brings_the_next_50_and_moves_the_live_window(rita: Client, team: Team) -> None:
    step = busy_step(team, 120)
    first = rita.get(f"/steps/{step.pk}/").content.decode()
    link = older_link(first)
    assert link is not None
    assert f'hx-get="{link}" hx-target="#timeline-older" hx-swap="outerHTML"' in first

    response = rita.get(link, **htmx_headers("timeline-older"))

    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html
    assert html.lstrip().startswith('<li id="timeline-older"')
    assert len(entries(html)) == PAGE_SIZE
    assert not set(correlation_ids(html)) & set(correlation_ids(first))
    # The poll's window now starts at the oldest entry shown, so a refresh keeps these.
    window = re.search(r'<div id="timeline-window" hidden hx-swap-oob="true">(.*?)</div>', html)
    assert window is not None
    since = re.search(r'name="since" value="([^"]+)"', window.group(1))
    assert since is not None and Cursor.parse(since.group(1)) is not None
    assert 'name="older" value="1"' in window.group(1)

    last = rita.get(older_link(html) or "", **htmx_headers("timeline-older")).content.decode()
    assert len(entries(last)) == 120 - 2 * PAGE_SIZE
    assert older_link(last) is None
    assert 'name="older" value="0"' in last


def test_a_refresh_keeps_the_older_events_the_reviewer_opened(rita: Client, agent: AgentClient, team: Team) -> None:
    step = busy_step(team, 80)
    older = rita.get(
        older_link(rita.get(f"/steps/{step.pk}/").content.decode()) or "", **htmx_headers("timeline-older")
    )
    since = re.search(r'name="since" value="([^"]+)"', older.content.decode())
    assert since is not None
    ingest(team, success_envelope(operation_ref="busy/1", correlation_id="newest"), timezone.now())

    refreshed = rita.get(
        f"/steps/{step.pk}/?seen=succeeded&v=stale&since={since.group(1)}&older=0", **htmx_headers("step-live")
    )

    html = refreshed.content.decode()
    assert refreshed.status_code == 200
    assert len(entries(html)) == 81
    assert correlation_ids(html)[-1] == "newest"
    assert older_link(html) is None


def test_the_poll_sends_nothing_while_nothing_changed(rita: Client, agent: AgentClient, reviewer: Any) -> None:
    step = post_envelope(agent, approval_envelope(operation_ref="poll/1"))
    page = rita.get(f"/steps/{step.pk}/").content.decode()
    poll = re.search(r'id="step-live" aria-labelledby="h-timeline" hx-get="([^"]+)"', page)
    assert poll is not None
    url = poll.group(1).replace("&amp;", "&")

    unchanged = rita.get(url, **htmx_headers("step-live"))

    assert unchanged.status_code == 204
    assert unchanged.content == b""

    step_decide(team=step.team, step_id=step.pk, actor=reviewer, action="reject", reason="no")
    changed = rita.get(url, **htmx_headers("step-live"))
    assert changed.status_code == 200
    html = changed.content.decode()
    assert "Rejected</strong> by rita" in html and "out of date" in html
    new_url = re.search(r'hx-get="([^"]+)"', html)
    assert new_url is not None and new_url.group(1) != poll.group(1)
    assert rita.get(new_url.group(1).replace("&amp;", "&"), **htmx_headers("step-live")).status_code == 204


def test_a_webhook_try_is_a_change_the_poll_sends(rita: Client, agent: AgentClient, team: Team) -> None:
    step = post_envelope(agent, approval_envelope(operation_ref="poll/2"))
    page = rita.get(f"/steps/{step.pk}/").content.decode()
    url = re.search(r'id="step-live" aria-labelledby="h-timeline" hx-get="([^"]+)"', page)
    assert url is not None
    endpoint = WebhookEndpoint.objects.create(team=team, url="https://hooks.example.com/in", secret="whsec_x")
    message = OutboxMessage.objects.create(
        team=team, endpoint=endpoint, step=step, message_id="msg_1", event_type="step.state_changed", body="{}"
    )
    DeliveryTry.objects.create(message=message, number=1, status_code=503, latency_ms=12)

    response = rita.get(url.group(1).replace("&amp;", "&"), **htmx_headers("step-live"))

    assert response.status_code == 200
    assert "<strong>HTTP 503</strong>" in response.content.decode()


def queries_for(client: Client, url: str, **headers: str) -> tuple[int, int]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, **headers)
    return response.status_code, len(captured.captured_queries)


def test_reads_do_not_grow_with_the_steps_history(rita: Client, team: Team) -> None:
    small, large = busy_step(team, 12, ref="small/1"), busy_step(team, 200, ref="large/1")
    counts = {}
    for name, step in (("small", small), ("large", large)):
        html = rita.get(f"/steps/{step.pk}/").content.decode()
        poll = re.search(r'hx-get="(/steps/\d+/\?seen=[^"]+)"', html)
        assert poll is not None
        counts[name] = {
            "page": queries_for(rita, f"/steps/{step.pk}/"),
            "poll": queries_for(rita, poll.group(1).replace("&amp;", "&"), **htmx_headers("step-live")),
            "older": queries_for(rita, f"/steps/{step.pk}/?before={Cursor(2**53, 0, 'envelope', 1)}"),
        }

    assert counts["small"] == counts["large"]
    status, unchanged_poll = counts["large"]["poll"]
    assert status == 204
    assert unchanged_poll <= 6  # session, user, membership, step, version: no timeline read at all


def test_an_unreadable_cursor_shows_the_latest_events(rita: Client, team: Team) -> None:
    step = busy_step(team, 60)

    for cursor in ("nonsense", "1.0.envelope", "99999999999999999999.0.envelope.1", "1.9.envelope.1", "1.0.x.1"):
        response = rita.get(f"/steps/{step.pk}/?before={cursor}")
        assert response.status_code == 200
        assert len(entries(response.content.decode())) == PAGE_SIZE
        assert "Back to the latest events" not in response.content.decode()
        assert rita.get(f"/steps/{step.pk}/?before={cursor}", **htmx_headers("timeline-older")).status_code == 400


def test_another_teams_older_events_are_404(outsider: Any, agent: AgentClient, team: Team) -> None:
    step = busy_step(team, 60)
    client = Client()
    client.force_login(outsider)
    link = f"/steps/{step.pk}/?before={Cursor(2**53, 0, 'envelope', 1)}"

    assert client.get(link).status_code == 404
    assert client.get(link, **htmx_headers("timeline-older")).status_code == 404
    assert client.get(f"/steps/{step.pk}/?v=x", **htmx_headers("step-live")).status_code == 404


def test_envelopes_at_the_same_instant_are_neither_lost_nor_repeated_across_pages(rita: Client, team: Team) -> None:
    now = timezone.now() - timedelta(minutes=5)
    ingest(team, error_envelope(operation_ref="tie/1"), now)
    ingest(team, success_envelope(operation_ref="tie/1"), now)
    for n in range(PAGE_SIZE + 10):
        ingest(team, success_envelope(operation_ref="tie/1", correlation_id=f"same-{n}"), now)
    step = Step.objects.get(operation_ref="tie/1")

    html = rita.get(f"/steps/{step.pk}/").content.decode()
    seen = correlation_ids(html)
    link = older_link(html)
    while link:
        html = rita.get(link).content.decode()
        seen = correlation_ids(html) + seen
        link = older_link(html)

    assert len(seen) == len(set(seen)) == PAGE_SIZE + 12
    assert set(seen) == set(Envelope.objects.filter(step=step).values_list("correlation_id", flat=True))
