"""`holdpoint approve --grant-*` (contract §11, "approve and allow similar" from a terminal)
against the in-process fake of the reviewer API; tests/sdk/test_rules_example.py runs the
installed command against a real server."""

from __future__ import annotations

import json

import httpx

from .test_reviewer_cli import REF, FakeReviewerApi, holdpoint


def test_approve_sends_the_grant_and_prints_it_in_words() -> None:
    api = FakeReviewerApi()
    decide = api.decide

    def with_grant(request: httpx.Request, ref: str) -> httpx.Response:
        answer = decide(request, ref)
        body = answer.json()
        body["grant"] = {"id": 7, "tool": "issue_refund", "when_in_words": 'the input\'s order is "ord_7"',
                         "scope": "team", "max_uses": 5, "expires_at": "2026-11-29T13:05:00Z"}  # fmt: skip
        return httpx.Response(201, json=body)

    api.decide = with_grant  # type: ignore[method-assign]
    run = holdpoint(
        api, "approve", "payments", REF, "--grant-scope", "team", "--grant-when", 'input.order == "ord_7"',
        "--grant-max-uses", "5",
    )  # fmt: skip

    assert run.code == 0, run.err
    [post] = api.of("POST")
    assert json.loads(post.content)["grant"] == {"scope": "team", "when": 'input.order == "ord_7"', "max_uses": 5}
    assert (
        'grant 7: similar calls of issue_refund where the input\'s order is "ord_7"; scope team, '
        "5 uses at most, until 2026-11-29T13:05:00Z"
    ) in run.out


def test_grant_options_without_a_scope_are_a_usage_error_and_send_nothing() -> None:
    api = FakeReviewerApi()
    run = holdpoint(api, "approve", "payments", REF, "--grant-when", "true")

    assert run.code == 2
    assert "--grant-scope" in run.err
    assert api.of("POST") == []


def test_approve_without_grant_options_sends_no_grant() -> None:
    api = FakeReviewerApi()
    assert holdpoint(api, "approve", "payments", REF).code == 0
    [post] = api.of("POST")
    assert "grant" not in json.loads(post.content)
