"""Deciding a held call in the MCP client (issue 29, point 5): the `mcp` package's ClientSession
with an elicitation callback talks to a real `holdpoint-mcp` process configured with a reviewer
token file, against a live Holdpoint. The form's answer is a decision of the token's user
through the reviewer API; everything else of contract §3, §11 and §12 is Holdpoint's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connection
from holdpoint_sdk import input_fingerprint
from holdpoint_sdk.mcp_proxy.cli import config_from_args
from holdpoint_sdk.mcp_proxy.server import upstream_environment

from accounts.groups import group_member_add
from accounts.services import reviewer_create
from approvals.services import step_decide
from envelopes.configuration import tool_configure
from envelopes.models import Step
from policy.services import rules_replace
from reviewers.services import reviewer_token_create
from tests.mcp.conftest import Rig

pytestmark = [pytest.mark.django_db(transaction=True)]

INVOICE = {"customer": "cus_9", "amount": 1250}
BIG = "has(input.amount) && input.amount > 1000"
ENV = {"HOLDPOINT_URL": "http://127.0.0.1:8000", "HOLDPOINT_API_KEY": "hp_test"}

Answer = Callable[[types.ElicitRequestParams], types.ElicitResult]


class Client:
    """The elicitation callback of a client whose human answers each form with `answer`, and
    what it was asked."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.asked: list[types.ElicitRequestFormParams] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        self.asked.append(params)
        return self.answer(params)


def accept(**content: Any) -> Answer:
    return lambda params: types.ElicitResult(action="accept", content=content or {"decision": "approve"})


def answered(action: str) -> Answer:
    return lambda params: types.ElicitResult(action=action)  # type: ignore[arg-type]


def text(result: types.CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, types.TextContent))


def holdpoint(result: types.CallToolResult) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict)
    return result.structured_content["holdpoint"]


def only_step(rig: Rig, tool: str) -> Step:
    steps = list(Step.objects.filter(team=rig.team, tool__name=tool))
    assert len(steps) == 1, [s.operation_ref for s in steps]
    return steps[0]


def decisions(step: Step) -> list[tuple[str, str, str]]:
    return [(d.action, d.reviewer.get_username() if d.reviewer else "", d.reason) for d in step.decisions.all()]


@pytest.fixture
def rita(rig: Rig) -> User:
    cache.clear()  # the reviewer API's throttle counts
    return reviewer_create(username="rita", password="x-unused-pw-1", team=rig.team, role="reviewer")


def token_file(tmp_path: Path, user: User) -> Path:
    path = tmp_path / f"{user.get_username()}.token"
    path.write_text(reviewer_token_create(user=user, name="mcp client").raw + "\n")
    path.chmod(0o600)
    return path


def reviewing(tmp_path: Path, user: User) -> tuple[str, ...]:
    return ("--reviewer-token-file", str(token_file(tmp_path, user)), "--reviewer-team", "mcp")


def hold_for_big_invoices(rig: Rig, **extra: Any) -> None:
    rule = {"name": "big-invoices", "tools": ["create_invoice"], "when": BIG, "effect": "require_approval"}
    rules_replace(team=rig.team, rules=[rule | extra], actor="ada", if_version=None)


def call(
    rig: Rig,
    *args: str,
    client: Client | None = None,
    tool: str = "create_invoice",
    arguments: dict[str, Any] = INVOICE,
    **env: str,
) -> types.CallToolResult:
    async def main() -> types.CallToolResult:
        async with rig.session(*args, elicitation_callback=client, **env) as session:
            return await session.call_tool(tool, arguments)

    return anyio.run(main)


def test_an_accepted_form_approves_as_the_token_s_user_and_the_tool_runs_once(
    rig: Rig, rita: User, tmp_path: Path
) -> None:
    hold_for_big_invoices(rig)
    client = Client(accept(decision="approve", reason="checked the customer"))

    result = call(rig, *reviewing(tmp_path, rita), client=client)

    assert not result.is_error, text(result)
    assert result.structured_content["invoice_id"] == "inv_1"
    assert holdpoint(result)["client_review"] == {"outcome": "approved", "code": None}
    assert "Holdpoint: rita approved it in the client." in text(result)
    assert "is done (committed)" in text(result)
    # The form showed what the approval binds, as Holdpoint stored it.
    [form] = client.asked
    assert "Tool: create_invoice" in form.message
    assert 'Input (the agent\'s, untrusted): {"amount":1250,"customer":"cus_9"}' in form.message
    assert f"Fingerprint: sha256 {input_fingerprint(INVOICE)}" in form.message
    assert f"Held by: rule big-invoices v1: {BIG}" in form.message
    assert "Approvals: 0 of 1 approval, from any reviewer of the team" in form.message
    assert form.requested_schema["properties"]["decision"]["enum"] == ["approve", "reject"]
    calls = rig.upstream_calls("create_invoice")
    assert [c["meta"].get("dev.holdpoint/approved") for c in calls] == [True]
    done = only_step(rig, "create_invoice")
    assert done.state == "succeeded"
    assert decisions(done) == [("approve", "rita", "checked the customer")]


def test_a_four_eyes_tool_stays_held_after_one_accept_and_runs_after_a_second_reviewer(
    rig: Rig, rita: User, tmp_path: Path
) -> None:
    tool_configure(team=rig.team, name="create_invoice", settings={"required_approvals": 2}, actor="ada")
    hold_for_big_invoices(rig)
    args = reviewing(tmp_path, rita)

    first = call(rig, *args, client=Client(accept()))

    assert first.is_error and holdpoint(first)["directive"]["action"] == "hold"
    assert holdpoint(first)["client_review"] == {"outcome": "approval_counted", "code": None}
    assert "rita approved it in the client; it needs more: 1 of 2 approvals (rita)" in text(first)
    assert "The tool was not called." in text(first)
    held = only_step(rig, "create_invoice")
    assert (held.state, decisions(held)) == ("awaiting_approval", [("approve", "rita", "approved in the MCP client")])
    assert rig.upstream_calls("create_invoice") == []

    # rita again: Holdpoint counts distinct reviewers, and says so.
    again = call(rig, *args, client=Client(accept()))
    assert again.is_error and holdpoint(again)["client_review"] == {
        "outcome": "refused",
        "code": "decision_not_allowed",
    }
    assert "a second reviewer must approve it" in text(again)
    assert len(only_step(rig, "create_invoice").decisions.all()) == 1

    fay = reviewer_create(username="fay", password="x-unused-pw-2", team=rig.team, role="reviewer")
    step_decide(team=rig.team, step_id=held.pk, actor=fay, action="approve", reason="second pair of eyes")
    ran = call(rig)  # a client that cannot ask: the step is approved, the gate grants

    assert not ran.is_error and ran.structured_content["invoice_id"] == "inv_1"
    assert len(rig.upstream_calls("create_invoice")) == 1
    assert only_step(rig, "create_invoice").state == "succeeded"


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (answered("decline"), "declined in the MCP client"),
        (accept(decision="reject", reason="duplicate refund"), "duplicate refund"),
    ],
)
def test_a_declined_form_rejects_the_step_with_a_reason_and_the_client_is_told_to_stop(
    rig: Rig, rita: User, tmp_path: Path, answer: Answer, reason: str
) -> None:
    # issue_refund asks for approval in its own answer: the hold comes with the report.
    rig.config_file.write_text("[tools.issue_refund]\nhold_wait_s = 0\n")
    client = Client(answer)

    rejected = call(
        rig,
        *reviewing(tmp_path, rita),
        client=client,
        tool="issue_refund",
        arguments={"order_id": "o_1", "amount": 900},
    )

    assert rejected.is_error
    assert holdpoint(rejected)["directive"] == {
        "action": "stop",
        "may_write": False,
        "not_before": None,
        "reason": "rejected",
    }
    assert holdpoint(rejected)["client_review"] == {"outcome": "rejected", "code": None}
    assert "is closed (rejected); do not call this tool again for it." in text(rejected)
    assert "rita rejected it in the client" in text(rejected)
    [form] = client.asked
    assert "Held by: the tool's answer asked for a reviewer (REFUND_ABOVE_LIMIT)" in form.message
    assert len(rig.upstream_calls("issue_refund")) == 1  # only the call that asked for approval
    closed = only_step(rig, "issue_refund")
    assert (closed.state, closed.reason) == ("cancelled", "rejected")
    assert decisions(closed) == [("reject", "rita", reason)]


def test_without_the_capability_or_the_token_the_hold_is_answered_as_today(
    rig: Rig, rita: User, tmp_path: Path
) -> None:
    hold_for_big_invoices(rig)
    args = reviewing(tmp_path, rita)

    today = call(rig, HOLDPOINT_RUN_ID="today")
    no_capability = call(rig, *args, HOLDPOINT_RUN_ID="no-capability")
    never_asked = Client(accept())
    no_token = call(rig, client=never_asked, HOLDPOINT_RUN_ID="no-token")

    assert never_asked.asked == []
    for held in (today, no_capability, no_token):
        assert held.is_error and holdpoint(held)["directive"]["action"] == "hold"
        assert "client_review" not in holdpoint(held)
        assert text(held) == (
            f"Holdpoint: held for a reviewer at {holdpoint(held)['step_url']}; do not call again until it is "
            "decided (approval_required). The tool was not called."
        )
    assert holdpoint(no_capability).keys() == holdpoint(today).keys()
    steps = Step.objects.filter(team=rig.team)
    assert sorted(s.run_id for s in steps) == ["no-capability", "no-token", "today"]
    assert {s.state for s in steps} == {"awaiting_approval"}
    assert not any(s.decisions.exists() for s in steps)
    assert rig.upstream_calls("create_invoice") == []


def test_a_reviewer_outside_the_step_s_group_gets_the_refusal_and_nothing_is_approved(
    rig: Rig, rita: User, tmp_path: Path
) -> None:
    fay = reviewer_create(username="fay", password="x-unused-pw-2", team=rig.team, role="reviewer")
    group_member_add(team=rig.team, name="finance", user=fay)
    hold_for_big_invoices(rig, approvers="finance")
    client = Client(accept())

    refused = call(rig, *reviewing(tmp_path, rita), client=client)

    [form] = client.asked
    assert "Approvals: 0 of 1 approval, waiting for finance" in form.message
    assert refused.is_error and holdpoint(refused)["directive"]["action"] == "hold"
    assert holdpoint(refused)["client_review"] == {"outcome": "refused", "code": "role_required"}
    assert "Holdpoint: your approve in the client was refused (Only reviewers and admins" in text(refused)
    assert "finance" in text(refused)
    held = only_step(rig, "create_invoice")
    assert (held.state, decisions(held)) == ("awaiting_approval", [])
    assert rig.upstream_calls("create_invoice") == []


def test_a_cancelled_form_decides_nothing(rig: Rig, rita: User, tmp_path: Path) -> None:
    hold_for_big_invoices(rig)

    held = call(rig, *reviewing(tmp_path, rita), client=Client(answered("cancel")))

    assert held.is_error and holdpoint(held)["directive"]["action"] == "hold"
    assert holdpoint(held)["client_review"] == {"outcome": "not_decided", "code": None}
    assert "Holdpoint: cancelled in the client; nothing was decided." in text(held)
    assert (only_step(rig, "create_invoice").state, decisions(only_step(rig, "create_invoice"))) == (
        "awaiting_approval",
        [],
    )


# --- the options ---------------------------------------------------------------------------------


def refused_start(argv: list[str], capsys: pytest.CaptureFixture[str], environ: dict[str, str] = ENV) -> str:
    with pytest.raises(SystemExit) as stopped:
        config_from_args(["--upstream", "python server.py", *argv], environ)
    assert stopped.value.code == 2
    return capsys.readouterr().err


def test_the_reviewer_token_comes_from_a_file_its_owner_alone_may_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "token"
    path.write_text("hpr_abcdefgh_secret\n")
    path.chmod(0o640)
    config = config_from_args(["--upstream", "srv", "--reviewer-token-file", str(path), "--reviewer-team", "mcp"], ENV)
    assert (config.reviewer_token, config.reviewer_team) == ("hpr_abcdefgh_secret", "mcp")
    assert "hpr_" not in repr(config)
    from_env = config_from_args(
        ["--upstream", "srv"],
        {**ENV, "HOLDPOINT_REVIEWER_TOKEN_FILE": str(path), "HOLDPOINT_REVIEWER_TEAM": "mcp"},
    )
    assert from_env.reviewer_token == "hpr_abcdefgh_secret"
    assert config_from_args(["--upstream", "srv"], ENV).reviewer_token is None

    path.chmod(0o644)
    loose = refused_start(["--reviewer-token-file", str(path), "--reviewer-team", "mcp"], capsys)
    assert "may be read or written by any user" in loose and "chmod 600" in loose
    assert "hpr_abcdefgh_secret" not in loose
    path.chmod(0o600)
    path.write_text("hp_an_agent_key\n")
    agent_key = refused_start(["--reviewer-token-file", str(path), "--reviewer-team", "mcp"], capsys)
    assert "must hold one reviewer token (hpr_...)" in agent_key and "hp_an_agent_key" not in agent_key
    no_team = refused_start(["--reviewer-token-file", str(path)], capsys)
    assert "needs its team" in no_team
    no_token = refused_start(["--reviewer-team", "mcp"], capsys)
    assert "--reviewer-team needs a reviewer token" in no_token
    missing = refused_start(["--reviewer-token-file", str(tmp_path / "nope"), "--reviewer-team", "mcp"], capsys)
    assert "nope" in missing
    # No option takes the token itself (argparse reads --reviewer-token as the file's option).
    given = refused_start(["--reviewer-token", "hpr_abcdefgh_secret", "--reviewer-team", "mcp"], capsys)
    assert "never the token itself" in given and "hpr_abcdefgh_secret" not in given


def test_the_upstream_is_not_told_where_the_reviewer_token_is() -> None:
    env = upstream_environment({"HOLDPOINT_REVIEWER_TOKEN_FILE": "/run/secrets/hpr", "PATH": "/bin"})
    assert env == {"PATH": "/bin"}


def test_a_step_decided_by_another_reviewer_while_the_form_was_open_is_not_decided_again(
    rig: Rig, rita: User, tmp_path: Path
) -> None:
    hold_for_big_invoices(rig)
    fay = reviewer_create(username="fay", password="x-unused-pw-2", team=rig.team, role="reviewer")

    def fay_rejects() -> None:
        try:
            held = Step.objects.get(team=rig.team, state="awaiting_approval")
            step_decide(team=rig.team, step_id=held.pk, actor=fay, action="reject", reason="not this customer")
        finally:
            connection.close()

    class Meanwhile(Client):
        async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            await anyio.to_thread.run_sync(fay_rejects)  # while rita reads the form
            return await super().__call__(context, params)

    answered_late = call(rig, *reviewing(tmp_path, rita), client=Meanwhile(accept()))

    # rita's approval named the ETag of the version she saw: refused 412, nothing decided twice.
    assert answered_late.is_error
    assert holdpoint(answered_late)["client_review"] == {"outcome": "refused", "code": "step_changed"}
    assert "your approve in the client was refused (The step changed since that ETag" in text(answered_late)
    assert holdpoint(answered_late)["directive"]["reason"] == "rejected"
    assert "is closed (rejected)" in text(answered_late)
    closed = only_step(rig, "create_invoice")
    assert (closed.state, decisions(closed)) == ("cancelled", [("reject", "fay", "not this customer")])
    assert rig.upstream_calls("create_invoice") == []
