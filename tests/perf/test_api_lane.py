"""The agent API skips the pages' middleware (config.api_lane) and keeps the security headers."""

from __future__ import annotations

import pytest

from tests.conftest import AgentClient, error_envelope, logged_in


@pytest.fixture
def https(settings):  # type: ignore[no-untyped-def]
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SECURE_SSL_REDIRECT = True
    return settings


def test_an_api_answer_carries_the_security_headers_and_no_cookie_or_csp(agent: AgentClient, https) -> None:  # type: ignore[no-untyped-def]
    answer = agent.envelope(error_envelope(operation_ref="lane-1"), secure=True)

    assert answer.status_code == 201, answer.content
    assert answer["Strict-Transport-Security"].startswith("max-age=31536000")
    assert answer["X-Content-Type-Options"] == "nosniff"
    assert answer["Referrer-Policy"] == "same-origin"
    assert answer["X-Frame-Options"] == "DENY"
    assert answer["Content-Length"] == str(len(answer.content))
    assert not answer.cookies
    assert "Content-Security-Policy" not in answer
    assert "Cookie" not in answer.get("Vary", "")


def test_the_api_over_plain_http_is_still_redirected_to_https(agent: AgentClient, https) -> None:  # type: ignore[no-untyped-def]
    answer = agent.envelope(error_envelope(operation_ref="lane-2"))

    assert answer.status_code == 301
    assert answer["Location"].startswith("https://")


def test_an_api_problem_answer_carries_the_security_headers(agent: AgentClient) -> None:
    answer = agent.envelope(b"{not json")

    assert answer.status_code == 400
    assert answer["Content-Type"] == "application/problem+json"
    assert answer["X-Content-Type-Options"] == "nosniff"
    assert "Content-Security-Policy" not in answer


def test_a_page_still_runs_every_middleware(make_reviewer) -> None:  # type: ignore[no-untyped-def]
    page = logged_in(make_reviewer()).get("/")

    assert page.status_code == 200
    assert "Content-Security-Policy" in page
    assert page.wsgi_request.user.is_authenticated
    assert hasattr(page.wsgi_request, "htmx")
    login = logged_in(make_reviewer(username="sam")).get("/accounts/login/")
    assert "csrftoken" in login.cookies


@pytest.mark.parametrize("accept", ["", "*/*", "application/json"])
def test_json_is_answered_without_negotiating_for_what_agents_send(agent: AgentClient, accept: str) -> None:
    answer = agent.step("no-such-step", HTTP_ACCEPT=accept)

    assert answer.status_code == 404
    assert answer["Content-Type"] == "application/problem+json"


def test_any_other_accept_is_still_negotiated(agent: AgentClient) -> None:
    assert agent.step("no-such-step", HTTP_ACCEPT="text/html").status_code == 406
    assert agent.step("no-such-step", HTTP_ACCEPT="application/*").status_code == 404
