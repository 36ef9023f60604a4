"""GET /metrics: Prometheus text for a staff session or the scrape token, never for anyone."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.test import Client

from metrics.prometheus import Family, render
from metrics.services import metrics_rollup
from tests.metrics.conftest import U
from webhooks.models import OutboxMessage, WebhookEndpoint

pytestmark = pytest.mark.django_db

NOW = U + timedelta(hours=2)
TOKEN = "scrape-token-0123456789"
METRIC_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(rf"^({METRIC_NAME})(?:\{{({LABEL}(?:,{LABEL})*)\}})? (-?[0-9.e+]+|NaN|[+-]Inf)$")


@pytest.fixture(autouse=True)
def _two_hours_after_the_window():  # type: ignore[no-untyped-def]
    with time_machine.travel(NOW, tick=False):
        yield


def parse(text: str) -> dict[tuple[str, frozenset], float]:
    """A strict reader of the text format: HELP and TYPE before each family's samples."""
    assert text.endswith("\n")
    samples: dict[tuple[str, frozenset], float] = {}
    typed: dict[str, str] = {}
    helped: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            assert re.fullmatch(METRIC_NAME, name) and name not in helped
            helped.add(name)
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge") and name in helped and name not in typed
            typed[name] = kind
        else:
            match = SAMPLE.match(line)
            assert match, line
            name, labels, value = match.groups()
            assert name in typed, f"{name} has no TYPE line before its samples"
            pairs = frozenset(re.findall(r'([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"', labels or ""))
            assert (name, pairs) not in samples, f"duplicate sample {line}"
            samples[(name, pairs)] = float(value)
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def staff() -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_user("ops", password="x", is_staff=True))
    return client


def test_anonymous_and_non_staff_users_get_401(scenario, client) -> None:
    response = client.get("/metrics")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    client.force_login(get_user_model().objects.create_user("vic", password="x"))
    assert client.get("/metrics").status_code == 401


def test_the_scrape_token_is_needed_when_set_and_refused_when_wrong(scenario, client, settings) -> None:
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 401  # no token set
    settings.HOLDPOINT_METRICS_TOKEN = TOKEN
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401


@pytest.mark.parametrize("rolled", [False, True])
def test_counters_are_totals_per_team_and_tool(scenario, rolled) -> None:
    if rolled:
        metrics_rollup(now=NOW)
    samples = parse(staff().get("/metrics").content.decode())
    invoice = {"team": "acme", "tool": "create_invoice"}
    assert value(samples, "holdpoint_envelopes_total", **invoice) == 18
    assert value(samples, "holdpoint_error_envelopes_total", **invoice) == 15
    assert value(samples, "holdpoint_undocumented_error_envelopes_total", **invoice) == 3
    assert value(samples, "holdpoint_refusals_total", **invoice) == 4
    assert value(samples, "holdpoint_duplicate_writes_prevented_total", **invoice) == 3
    assert value(samples, "holdpoint_escalations_total", **invoice) == 4
    assert value(samples, "holdpoint_unknown_outcomes_total", **invoice) == 4
    assert value(samples, "holdpoint_approvals_total", **invoice, outcome="expired") == 1
    assert value(samples, "holdpoint_envelopes_total", team="globex", tool="create_invoice") == 1
    assert value(samples, "holdpoint_envelopes_total", team="acme", tool="send_email") == 1


def test_gauges_show_held_steps_by_state_and_the_oldest_ones_age(scenario) -> None:
    samples = parse(staff().get("/metrics").content.decode())
    invoice = {"team": "acme", "tool": "create_invoice"}
    assert value(samples, "holdpoint_held_steps", **invoice, state="escalated") == 4  # F J K P
    assert value(samples, "holdpoint_held_steps", **invoice, state="verifying") == 1  # N
    assert value(samples, "holdpoint_held_steps", **invoice, state="awaiting_approval") == 0
    # F escalated at S + 3300 s; now is S + 4 h.
    assert value(samples, "holdpoint_oldest_held_step_age_seconds", **invoice, state="escalated") == 14400 - 3300
    assert value(samples, "holdpoint_oldest_held_step_age_seconds", **invoice, state="verifying") == 14400 + 1


def test_the_outbox_backlog_counts_pending_messages_per_team(scenario) -> None:
    from accounts.models import Team

    team = Team.objects.get(slug="acme")
    endpoint = WebhookEndpoint.objects.create(team=team, url="https://hooks.example/x", secret="whsec_x")
    for n, status in enumerate(["pending", "pending", "delivered", "dead"]):
        OutboxMessage.objects.create(
            team=team, endpoint=endpoint, message_id=f"m{n}", event_type="step.state_changed", body="{}",
            status=status, created_at=NOW - timedelta(seconds=60 * (n + 1)),
        )
    samples = parse(staff().get("/metrics").content.decode())
    assert value(samples, "holdpoint_outbox_pending_messages", team="acme") == 2
    assert value(samples, "holdpoint_outbox_oldest_pending_age_seconds", team="acme") == 120


def test_label_values_are_escaped() -> None:
    family = Family("x_total", "counter", "A help\\text\nwith a newline.")
    family.add({"tool": 'a"b\\c\nd'}, 3)
    text = render([family])
    assert text.splitlines() == [
        "# HELP x_total A help\\\\text\\nwith a newline.",
        "# TYPE x_total counter",
        'x_total{tool="a\\"b\\\\c\\nd"} 3',
    ]
    assert parse(text)
