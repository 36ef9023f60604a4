"""`holdpoint`, the reviewers' command line, against an in-process fake of the reviewer API
(contract §10); test_reviewer_cli_live.py runs the installed command against a real server."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from holdpoint_sdk import input_fingerprint
from holdpoint_sdk.reviewer_cli import main

from .conftest import problem, step

BASE = "https://holdpoint.test"
TOKEN = "hpr_test_token"
REF = "run_81/step_4"
PROPOSED = {"order": "ord_7", "amount": 900, "note": "refund \x1b[2J\x1b[31mAPPROVED\u202e"}


def held(**overrides: Any) -> dict[str, Any]:
    body = step("awaiting_approval", "hold", reason="approval_pending", tool="issue_refund", **overrides)
    body.setdefault(
        "proposal",
        {"attempt": 1, "input_fingerprint": input_fingerprint(PROPOSED), "input": PROPOSED,
         "input_redacted": False, "proposed_at": "2026-11-29T12:00:00Z"},
    )  # fmt: skip
    return body


@dataclass
class FakeReviewerApi:
    """The reviewer API of one team, "payments", with one held step whose ETag is "41.1"."""

    steps: dict[str, dict[str, Any]] = field(default_factory=lambda: {REF: held()})
    etag: str = '"41.1"'
    requests: list[httpx.Request] = field(default_factory=list)
    answer: httpx.Response | None = None  # scripted, for any request

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return problem(401, "not_authenticated")
        if self.answer is not None:
            return self.answer
        path = request.url.path  # decoded: the ref's %2F is a slash again
        prefix = "/api/v1/teams/payments/"
        if not path.startswith(prefix):
            return problem(404, "not_found")
        rest = path[len(prefix) :]
        if rest == "queue":
            return self.queue(request)
        if rest.startswith("steps/") and rest.endswith("/decisions") and request.method == "POST":
            return self.decide(request, rest[len("steps/") : -len("/decisions")])
        if rest.startswith("steps/") and rest[len("steps/") :] in self.steps:
            return httpx.Response(200, json=self.steps[rest[len("steps/") :]], headers={"ETag": self.etag})
        return problem(404, "not_found")

    def queue(self, request: httpx.Request) -> httpx.Response:
        state = {"approvals": "awaiting_approval", "verifications": "verifying", "escalations": "escalated"}
        results = [s for s in self.steps.values() if s["state"] == state[request.url.params["kind"]]]
        start = int(request.url.params.get("cursor", "0"))
        limit = int(request.url.params.get("limit", "50"))
        page = results[start : start + limit]
        more = start + limit < len(results)
        next_url = f"https://elsewhere.example/api/v1/teams/payments/queue?cursor={start + limit}" if more else None
        return httpx.Response(200, json={"results": page, "next": next_url})

    def decide(self, request: httpx.Request, ref: str) -> httpx.Response:
        if "If-Match" not in request.headers:
            return problem(428, "precondition_required")
        if request.headers["If-Match"] != self.etag:
            return problem(412, "step_changed")
        body = json.loads(request.content)
        after = step("retry_ready", "proceed", reason="approved", operation_ref=ref, tool="issue_refund")
        decision = {"action": body["action"], "reviewer": "rita", "reason": body.get("reason", ""),
                    "decided_at": "2026-11-29T12:05:00Z", "input_fingerprint": None,
                    "edited": "input" in body}  # fmt: skip
        return httpx.Response(201, json={"decision": decision, "step": after})

    def of(self, method: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.method == method]


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def api() -> FakeReviewerApi:
    return FakeReviewerApi()


def holdpoint(api: FakeReviewerApi, *argv: str, token: str = TOKEN, stdin: str = "") -> Run:
    out, err = io.StringIO(), io.StringIO()
    code = main(
        list(argv),
        environ={"HOLDPOINT_URL": BASE, "HOLDPOINT_TOKEN": token} if token else {"HOLDPOINT_URL": BASE},
        transport=httpx.MockTransport(api),
        stdin=io.StringIO(stdin),
        stdout=out,
        stderr=err,
    )
    return Run(code, out.getvalue(), err.getvalue())


def test_queue_prints_a_table_of_the_held_steps_with_their_input(api: FakeReviewerApi) -> None:
    run = holdpoint(api, "queue", "payments")
    assert run.code == 0, run.err
    header, row = run.out.splitlines()
    assert header.split() == ["OPERATION_REF", "TOOL", "STATE", "REASON", "ATTEMPTS", "WAITING", "INPUT"]
    assert row.startswith(REF) and "issue_refund" in row and "approval_pending" in row
    assert 'order="ord_7"' in row and "amount=900" in row
    [request] = api.requests
    assert request.url.params["kind"] == "approvals"
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"


def test_agent_text_cannot_drive_the_terminal(api: FakeReviewerApi) -> None:
    api.steps = {"evil\x1b]0;pwned\x07\r": held(operation_ref="evil\x1b]0;pwned\x07\r")}
    for argv in (("queue", "payments"), ("show", "payments", "evil\x1b]0;pwned\x07\r")):
        run = holdpoint(api, *argv)
        assert run.code == 0, run.err
        assert not any(c in run.out for c in "\x1b\x07\r\u202e"), run.out
        assert "evil\\x1b]0;pwned\\x07\\x0d" in run.out


def test_queue_asks_for_the_kind_and_follows_the_cursor_on_its_own_server(api: FakeReviewerApi) -> None:
    api.steps = {f"r/{n}": held(operation_ref=f"r/{n}") for n in range(5)}
    run = holdpoint(api, "--json", "queue", "payments", "--kind", "approvals", "--limit", "3")
    assert run.code == 0, run.err
    assert [s["operation_ref"] for s in json.loads(run.out)["results"]] == ["r/0", "r/1", "r/2"]
    assert all(r.url.host == "holdpoint.test" for r in api.requests)
    assert holdpoint(api, "queue", "payments", "--kind", "verifications").out.strip() == "nothing waiting"
    assert api.requests[-1].url.params["kind"] == "verifications"


def test_show_prints_the_proposed_input_the_etag_and_how_to_decide(api: FakeReviewerApi) -> None:
    run = holdpoint(api, "show", "payments", REF)
    assert run.code == 0, run.err
    assert f"etag         {api.etag}" in run.out
    assert f"sha256 {input_fingerprint(PROPOSED)}" in run.out
    assert '"amount": 900' in run.out and '"order": "ord_7"' in run.out
    assert "refund \\u001b[2J\\u001b[31mAPPROVED\\u202e" in run.out  # JSON's escape, then ours
    hint = "decide (approve | reject): holdpoint COMMAND payments run_81/step_4 --etag '\"41.1\"' --reason ..."
    assert hint in run.out
    assert api.requests[0].url.raw_path.decode() == "/api/v1/teams/payments/steps/run_81%2Fstep_4"


def test_show_names_the_decisions_the_state_allows(api: FakeReviewerApi) -> None:
    api.steps[REF] = step("verifying", "verify", reason="verification_required")
    assert (
        "decide (mark-committed | permit-retry | cancel): holdpoint COMMAND"
        in holdpoint(api, "show", "payments", REF).out
    )
    api.steps[REF] = step("succeeded", "stop", reason="committed")
    assert "decide" not in holdpoint(api, "show", "payments", REF).out


def test_show_says_when_the_agent_sent_no_input(api: FakeReviewerApi) -> None:
    api.steps[REF] = held(proposal=None)
    assert "the agent sent no input" in holdpoint(api, "show", "payments", REF).out
    assert "(no input sent)" in holdpoint(api, "queue", "payments").out


def test_show_json_carries_the_step_and_its_etag(api: FakeReviewerApi) -> None:
    run = holdpoint(api, "--json", "show", "payments", REF)
    answer = json.loads(run.out)
    assert answer["etag"] == api.etag and answer["step"]["proposal"]["input"] == PROPOSED
    assert "\x1b" not in run.out  # JSON escapes it


def test_approve_with_the_etag_show_printed_sends_it_as_if_match(api: FakeReviewerApi) -> None:
    run = holdpoint(api, "approve", "payments", REF, "--etag", '"41.1"', "--reason", "checked")
    assert run.code == 0, run.err
    [post] = api.of("POST")
    assert api.of("GET") == []
    assert post.headers["If-Match"] == '"41.1"'
    assert json.loads(post.content) == {"action": "approve", "reason": "checked"}
    assert post.url.raw_path.decode() == "/api/v1/teams/payments/steps/run_81%2Fstep_4/decisions"
    assert run.out.strip() == "approve run_81/step_4 (issue_refund) as rita: now retry_ready (approved)"


def test_without_an_etag_the_step_is_read_and_decided_as_it_is(api: FakeReviewerApi) -> None:
    run = holdpoint(api, "reject", "payments", REF, "--reason", "duplicate")
    assert run.code == 0, run.err
    assert [r.method for r in api.requests] == ["GET", "POST"]
    assert api.of("POST")[0].headers["If-Match"] == api.etag
    assert json.loads(api.of("POST")[0].content) == {"action": "reject", "reason": "duplicate"}


@pytest.mark.parametrize(
    ("command", "action"),
    [("cancel", "cancel"), ("mark-committed", "mark_committed"), ("permit-retry", "permit_retry")],
)
def test_every_decision_has_its_command(api: FakeReviewerApi, command: str, action: str) -> None:
    assert holdpoint(api, command, "payments", REF, "--reason", "r").code == 0
    assert json.loads(api.of("POST")[0].content)["action"] == action


def test_approve_with_an_edited_input_from_a_file(api: FakeReviewerApi, tmp_path: Path) -> None:
    edited = {"order": "ord_7", "amount": 400}
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(edited), encoding="utf-8")
    run = holdpoint(api, "approve", "payments", REF, "--reason", "lower", "--input", str(path))
    assert run.code == 0, run.err
    assert json.loads(api.of("POST")[0].content)["input"] == edited
    assert f"approved the edited input, sha256 {input_fingerprint(edited)}" in run.out
    from_stdin = holdpoint(api, "approve", "payments", REF, "--input", "-", stdin=json.dumps(edited))
    assert from_stdin.code == 0 and json.loads(api.of("POST")[-1].content)["input"] == edited


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[1, 2]", "holds a JSON list: an input is a JSON object"),
        ("{nope", "is not JSON"),
        (None, "cannot read"),
        # Ambiguous: the step page refuses it too; json.loads would silently keep the last.
        ('{"amount": 100, "to": "acct_1", "amount": 100000}', "names 'amount' twice"),
        ('{"amount": NaN}', "is not JSON: NaN"),
    ],
)
def test_an_input_file_that_is_not_a_json_object_decides_nothing(
    api: FakeReviewerApi, tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "edited.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    run = holdpoint(api, "approve", "payments", REF, "--input", str(path))
    assert run.code == 2 and message in run.err
    assert api.requests == []


@pytest.mark.parametrize(
    ("status", "code", "exit_code", "message"),
    [
        (401, "not_authenticated", 3, "Holdpoint refused the token"),
        (403, "role_required", 4, "not allowed: role_required happened"),
        (404, "not_found", 5, "not found: no run_81/step_4 in team payments"),
        (409, "decision_not_allowed", 6, "the step's state does not allow this decision"),
        (412, "step_changed", 7, "the step changed since you looked: run show again"),
        (428, "precondition_required", 8, "run show, then pass --etag"),
        (429, "throttled", 10, "too many requests"),
        (500, "internal", 1, "Holdpoint answered 500"),
    ],
)
def test_each_refusal_has_its_exit_code_and_a_clear_message(
    api: FakeReviewerApi, status: int, code: str, exit_code: int, message: str
) -> None:
    api.answer = problem(status, code)
    run = holdpoint(api, "approve", "payments", REF, "--etag", '"41.1"', "--reason", "r")
    assert (run.code, run.out) == (exit_code, "")
    assert message in run.err and run.err.startswith("holdpoint: ")
    assert len(api.of("POST")) == 1  # a decision is never sent twice, not even after a 500


def test_a_missing_reason_names_the_field(api: FakeReviewerApi) -> None:
    api.answer = problem(422, "decision_invalid", errors=[{"field": "reason", "rule": "required"}])
    run = holdpoint(api, "--json", "cancel", "payments", REF, "--etag", '"41.1"')
    assert run.code == 9 and "(reason: required)" in run.err
    error = json.loads(run.out)["error"]
    assert (error["status"], error["code"], error["errors"]) == (
        422,
        "decision_invalid",
        [{"field": "reason", "rule": "required"}],
    )


def test_a_step_changed_since_show_is_not_decided(api: FakeReviewerApi) -> None:
    api.etag = '"41.2"'  # the agent moved, or another reviewer decided
    run = holdpoint(api, "approve", "payments", REF, "--etag", '"41.1"', "--reason", "ok")
    assert run.code == 7 and "run show again" in run.err


def test_no_token_is_a_usage_error_and_nothing_is_sent(api: FakeReviewerApi) -> None:
    run = holdpoint(api, "queue", "payments", token="")
    assert run.code == 2 and "HOLDPOINT_TOKEN" in run.err and api.requests == []


def test_a_wrong_token_is_exit_3(api: FakeReviewerApi) -> None:
    run = holdpoint(api, "queue", "payments", token="hpr_revoked")
    assert run.code == 3 and "check HOLDPOINT_TOKEN" in run.err


def test_holdpoint_unreachable_is_exit_11(api: FakeReviewerApi) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["show", "payments", REF],
        environ={"HOLDPOINT_TOKEN": TOKEN, "HOLDPOINT_URL": BASE},
        transport=httpx.MockTransport(refuse),
        stdout=out,
        stderr=err,
    )
    assert code == 11 and "no answer from Holdpoint" in err.getvalue()


def test_bad_arguments_are_exit_2(api: FakeReviewerApi, capsys: pytest.CaptureFixture[str]) -> None:
    assert holdpoint(api, "queue", "payments", "--kind", "everything").code == 2
    assert holdpoint(api, "approve", "payments").code == 2
    assert api.requests == []


def test_the_sdk_declares_the_holdpoint_command() -> None:
    pyproject = (Path(__file__).resolve().parents[2] / "sdk" / "pyproject.toml").read_text(encoding="utf-8")
    assert 'holdpoint = "holdpoint_sdk.reviewer_cli:main"' in pyproject
