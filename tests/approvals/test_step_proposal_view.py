"""The proposed action on the step page and in the queues (contract §7, issue 11 point 3): the
tool and the input as a tree, its fingerprint, what changed since the previous attempt."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from approvals.services import step_decide
from envelopes.proposal import input_fingerprint
from tests.approvals.conftest import approval_envelope, held_with_input, post_envelope, propose
from tests.conftest import AgentClient, error_envelope

pytestmark = pytest.mark.django_db

REFUND = {"amount": 1250, "currency": "EUR", "customer": "cus_9", "order": {"id": "ord_77", "lines": [1, 2]}}


def proposal_html(client: Client, pk: int) -> str:
    html = client.get(f"/steps/{pk}/").content.decode()
    match = re.search(r'<section aria-labelledby="h-proposal".*?</section>', html, re.S)
    assert match, "the step page has a proposed action section"
    return match.group(0)


def test_it_shows_the_tool_the_input_and_its_fingerprint(rita: Client, agent: AgentClient) -> None:
    step = held_with_input(agent, "run_1/refund", REFUND)

    html = proposal_html(rita, step.pk)

    assert "<code>charge_card</code>" in html
    assert f'<code class="fingerprint" id="input-fingerprint">{input_fingerprint(REFUND)}</code>' in html
    assert "attempt 1" in html
    tree = re.search(r'<div class="untrusted input-view" hx-disable>.*?</div>', html, re.S)
    assert tree, "the input sits in an element marked untrusted, htmx disabled"
    leaves = dict(
        re.findall(r'<span class="tree-key">([^<]+)</span>: <span class="tree-value[^"]*">([^<]*)</span>', html)
    )
    assert leaves == {"amount": "1250", "currency": "EUR", "customer": "cus_9", "id": "ord_77"}
    assert re.search(r'<span class="tree-key">order</span> <span class="tree-type">\{ \} 2 keys</span>', html)
    assert re.search(r'<span class="tree-key">lines</span> <span class="tree-type">\[ \] 2 items</span>', html)


def test_a_step_without_an_attempt_says_there_is_no_input(rita: Client, agent: AgentClient) -> None:
    step = post_envelope(agent, approval_envelope(operation_ref="run_1/no-attempt"))

    html = proposal_html(rita, step.pk)

    assert "has not asked for an attempt" in html
    assert "input-tree" not in html


def test_an_attempt_without_input_says_the_agent_sent_none(rita: Client, agent: AgentClient) -> None:
    step = held_with_input(agent, "run_1/fingerprint-only", None)

    html = proposal_html(rita, step.pk)

    assert "The agent sent no input with this attempt" in html
    assert 'id="input-fingerprint"' in html
    assert "input-tree" not in html


def test_it_shows_what_changed_since_the_previous_attempt(rita: Client, agent: AgentClient) -> None:
    ref = "run_1/corrected"
    propose(agent, ref, {"amount": 1250, "customer": "cus_9", "note": "first", "tags": ["a", "b"]})
    fix = error_envelope(
        operation_ref=ref,
        tool="charge_card",
        code="CUSTOMER_MISSING",
        category="validation",
        commit_state="not_committed",
        retry={"directive": "after_input_fix", "max_attempts_remaining": 2},
        next_action="correct_input",
    )
    assert agent.envelope(fix).status_code == 201
    step = held_with_input(agent, ref, {"amount": 1300, "customer": "cus_9", "order": "ord_1", "tags": ["a"]})

    html = proposal_html(rita, step.pk)

    assert "What changed since attempt 1" in html
    changes = re.findall(
        r'<li class="diff-(\w+)"><span class="diff-kind">\w+</span> <code class="diff-path">([^<]+)</code>', html
    )
    assert changes == [("changed", "/amount"), ("removed", "/note"), ("added", "/order"), ("removed", "/tags/1")]
    assert re.search(
        r'<span class="diff-old">1250</span> <span aria-label="became">→</span> <span class="diff-new">1300</span>',
        html,
    )


def test_the_same_input_again_says_nothing_changed(rita: Client, agent: AgentClient, reviewer: Any) -> None:
    ref = "run_1/same"
    propose(agent, ref, {"amount": 5})
    escalate = error_envelope(
        operation_ref=ref,
        tool="charge_card",
        code="UPSTREAM_REFUSED",
        category="dependency",
        retry={"directive": "never", "max_attempts_remaining": 0},
        next_action="escalate",
    )
    step = post_envelope(agent, escalate)
    step_decide(team=step.team, step_id=step.pk, actor=reviewer, action="permit_retry", reason="try again")
    step = held_with_input(agent, ref, {"amount": 5})

    html = proposal_html(rita, step.pk)

    assert "The same input as attempt 1: the agent changed nothing." in html


def test_redacted_values_are_marked_and_secrets_never_shown(rita: Client, agent: AgentClient) -> None:
    secret = "sk-live-" + "Zq3" * 12
    step = held_with_input(agent, "run_1/secret", {"api_key": "abc123", "note": f"use {secret} please", "amount": 3})

    html = rita.get(f"/steps/{step.pk}/").content.decode()
    section = proposal_html(rita, step.pk)

    assert secret not in html and "abc123" not in html
    assert "[REDACTED:key_name]" in section
    assert section.count('<span class="tag tag-warn">redacted</span>') == 2
    assert "redacted before storage: 2 values replaced" in section


def test_long_strings_are_folded(rita: Client, agent: AgentClient) -> None:
    long_text = "word " * 200
    step = held_with_input(agent, "run_1/long", {"memo": long_text})

    html = proposal_html(rita, step.pk)

    assert '<details class="fold"><summary><span class="tree-value tree-string">' in html
    assert f"({len(long_text)} characters)" in html


def test_hidden_characters_in_keys_and_values_are_written_out(rita: Client, agent: AgentClient) -> None:
    step = held_with_input(agent, "run_1/bidi", {"amo\u202eunt": "10\u200b0", "ok": "plain"})

    html = proposal_html(rita, step.pk)

    assert "\u202e" not in html and "\u200b" not in html
    assert "amo\\u202eunt" in html and "10\\u200b0" in html
    assert html.count("hidden characters shown") == 1


def test_queue_rows_show_a_line_of_the_input(rita: Client, agent: AgentClient) -> None:
    held_with_input(agent, "run_1/queued", REFUND)
    held_with_input(agent, "run_1/big", {f"field_{i:02}": "x" * 40 for i in range(40)})
    post_envelope(agent, approval_envelope(operation_ref="run_1/none"))

    html = rita.get("/").content.decode()

    lines = re.findall(r'<div class="input-summary" hx-disable>.*?<code>([^<]*)</code></div>', html, re.S)
    # The stored order, what a prefix of the row holds: PostgreSQL's jsonb keeps shorter keys
    # first; SQLite keeps the canonical order the input was stored in.
    if connection.vendor == "postgresql":
        assert "order: {…}, amount: 1250, currency: EUR, customer: cus_9" in lines
    else:
        assert "amount: 1250, currency: EUR, customer: cus_9, order: {…}" in lines
    (big,) = [line for line in lines if line.startswith("field_")]
    assert len(big) <= 80 and big.endswith("…")
    assert len(lines) == 2  # the step without an attempt has no line


def test_the_queue_reads_a_bounded_prefix_of_each_input(rita: Client, agent: AgentClient) -> None:
    for i in range(5):
        held_with_input(agent, f"run_1/q{i}", {"blob": "y" * 20_000, "n": i})
    rita.get("/")  # warm the session

    response = rita.get("/")

    assert len(response.content) < 60_000  # five 20 KB inputs are not sent whole
    assert response.content.decode().count('class="input-summary"') == 5


SECRETS = {
    "aws key": "AKIAIOSFODNN7EXAMPLE",
    "api key": "sk-live-" + "a1B2c3D4" * 4,
    "bearer": "Bearer eyJraWQiOiJxIn0abcdefghijklmnop0123456789",
    "url credentials": "S3cretPassw0rd",
    "json inside": "hunter2-Very-Secret",
    "credential key": "plainvalue-xyz-123",
}


def test_secrets_in_keys_values_arrays_and_json_strings_never_reach_a_page(rita: Client, agent: AgentClient) -> None:
    tool_input = {
        SECRETS["aws key"]: 1,
        "note": f"use {SECRETS['api key']} for this",
        "items": [
            {"header": SECRETS["bearer"]},
            ["nested", f"postgres://admin:{SECRETS['url credentials']}@db.example.com:5432/prod"],
        ],
        "payload": json.dumps({"password": SECRETS["json inside"], "amount": 3}),
        "client_secret": SECRETS["credential key"],
        "amount": 12,
    }
    step = held_with_input(agent, "run_1/secrets", tool_input)

    pages = {
        "step": rita.get(f"/steps/{step.pk}/").content.decode(),
        "queues": rita.get("/").content.decode(),
        "search": rita.get("/search", {"q": "run_1"}).content.decode(),
    }

    leaks = [(page, name) for page, html in pages.items() for name, secret in SECRETS.items() if secret in html]
    assert leaks == []
    assert "[REDACTED:" in pages["step"]
    assert "Edit and approve" not in pages["step"]  # a redacted input is not offered for editing


def test_search_results_show_a_line_of_the_input(rita: Client, agent: AgentClient) -> None:
    held_with_input(agent, "run_9/a", {"amount": 7}, run_id="run_9")
    held_with_input(agent, "run_9/b", None, run_id="run_9")

    html = rita.get("/search", {"q": "run_9"}).content.decode()

    assert re.findall(r'<div class="input-summary" hx-disable>.*?<code>([^<]*)</code></div>', html, re.S) == [
        "amount: 7"
    ]


def test_an_input_refused_after_an_approval_is_the_one_shown_for_review(
    rita: Client, agent: AgentClient, reviewer: Any
) -> None:
    ref = "run_1/mismatch"
    step = held_with_input(agent, ref, {"amount": 100})
    step_decide(team=step.team, step_id=step.pk, actor=reviewer, action="approve")
    other = {"amount": 100000}
    refused = agent.attempt(ref, tool="charge_card", fingerprint=input_fingerprint(other), input=other)
    assert refused.status_code == 409 and refused.json()["code"] == "approval_mismatch"

    html = proposal_html(rita, step.pk)

    assert "a request the gate refused" in html
    assert f'id="input-fingerprint">{input_fingerprint(other)}</code>' in html
    assert "What changed since attempt 1" in html
    assert re.search(
        r'<span class="diff-old">100</span> <span aria-label="became">→</span> <span class="diff-new">100000</span>',
        html,
    )
