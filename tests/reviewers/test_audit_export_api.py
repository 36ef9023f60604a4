"""GET /api/v1/teams/{team}/audit (contract §13): an admin's reviewer token streams the team's
links and seals as JSON lines, resumable by cursor; everyone else is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from approvals.services import step_decide
from envelopes.audit import audit_seal
from envelopes.models import AuditEvent, AuditSeal, Step
from evidence.models import ReceiptKey
from tests.approvals.conftest import approval_envelope, post_envelope
from tests.conftest import AgentClient

from .conftest import ReviewerClient, token_for

pytestmark = pytest.mark.django_db


def export(api: ReviewerClient, **params: str) -> Any:
    return api.http.get(f"/api/v1/teams/{api.team}/audit", params)


def lines(response: Any) -> list[dict[str, Any]]:
    body = b"".join(response.streaming_content)
    return [json.loads(line) for line in body.splitlines()]


@pytest.fixture
def admin_api(make_reviewer: Any) -> ReviewerClient:
    return token_for(make_reviewer("ada", "admin"))


@pytest.fixture
def history(agent: AgentClient, reviewer: Any, other_agent: AgentClient) -> list[Step]:
    steps = [post_envelope(agent, approval_envelope(operation_ref=f"run_7/charge_{n}")) for n in range(3)]
    for step in steps[:2]:
        step_decide(team=step.team, step_id=step.pk, actor=reviewer, action="approve")
    post_envelope(other_agent, approval_envelope(operation_ref="run_7/charge_0"))  # another team's
    audit_seal(team=steps[0].team)
    return steps


def test_an_admin_exports_every_link_then_the_seals(admin_api: ReviewerClient, history: list[Step]) -> None:
    response = export(admin_api)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson"
    assert response.streaming
    got = lines(response)
    header, rest = got[0], got[1:]
    assert header["type"] == "header" and header["format"] == "holdpoint-audit/1"
    assert header["team"] == {"id": history[0].team_id, "slug": "acme"}
    links = [line for line in rest if line["type"] == "link"]
    seals = [line for line in rest if line["type"] == "seal"]
    assert [line["type"] for line in rest] == ["link"] * len(links) + ["seal"] * len(seals)
    assert len(links) == AuditEvent.objects.filter(team=history[0].team).count()
    assert len(seals) == AuditSeal.objects.filter(team=history[0].team).count() == 1
    decisions = [line for line in links if line["fields"]["kind"] == "decision"]
    assert len(decisions) == 2 and all(line["fields"]["data"]["receipt"] for line in decisions)
    # Every field the hash covers is there: the stored hash is recomputed from them alone.
    from envelopes.audit import _link_hash

    assert all(_link_hash(line["prev_hash"], line["fields"]) == line["hash"] for line in links)
    seeds = ReceiptKey.objects.values_list("seed", flat=True)
    text = json.dumps(got)
    assert all(seed and seed not in text for seed in seeds)


def test_a_cursor_resumes_after_the_last_line_received(admin_api: ReviewerClient, history: list[Step]) -> None:
    full = b"".join(export(admin_api).streaming_content).splitlines(keepends=True)
    for cut in (1, 3, len(full) - 1):
        cursor = json.loads(full[cut])["cursor"]
        resumed = b"".join(export(admin_api, cursor=cursor).streaming_content).splitlines(keepends=True)
        assert full[: cut + 1] + resumed == full


def test_a_window_exports_only_its_links(admin_api: ReviewerClient, history: list[Step]) -> None:
    got = lines(export(admin_api, since="2000-01-01T00:00:00Z", until="2000-01-02T00:00:00Z"))
    assert [line["type"] for line in got] == ["header"]
    assert got[0]["since"] == "2000-01-01T00:00:00Z"


@pytest.mark.parametrize("role", ["viewer", "reviewer"])
def test_only_admins_export(make_reviewer: Any, history: list[Step], role: str) -> None:
    response = export(token_for(make_reviewer("vic", role)))
    assert response.status_code == 403
    assert response.json()["code"] == "role_required"


def test_another_team_is_not_found(make_reviewer: Any, history: list[Step]) -> None:
    response = export(token_for(make_reviewer("ada", "admin"), team="globex"))
    assert response.status_code == 404


def test_no_token_an_agent_key_or_a_bad_query_is_refused(
    admin_api: ReviewerClient, agent: AgentClient, history: list[Step]
) -> None:
    from rest_framework.test import APIClient

    assert APIClient().get("/api/v1/teams/acme/audit").status_code == 401
    assert agent.get("/api/v1/teams/acme/audit").status_code == 403
    assert export(admin_api, cursor="x1").status_code == 422
    assert export(admin_api, cursor="s1.2").status_code == 422
    assert export(admin_api, since="yesterday").status_code == 422
    assert export(admin_api, since="2026-01-02T00:00:00Z", until="2026-01-01T00:00:00Z").status_code == 422
    assert admin_api.http.post("/api/v1/teams/acme/audit").status_code == 405
