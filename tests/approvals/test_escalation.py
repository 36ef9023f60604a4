"""Escalation of a request for approval (contract §12): a tool's `escalate_after_s` and
`escalate_to`; a step still waiting that long may also be decided by that group, whose channels
(`@group:NAME`) are told; nothing is ever approved by time. The timer is a swept column
(Step.escalation_due_at), like the others."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from accounts.groups import group_create, group_member_add
from envelopes.configuration import ConfigurationError, tool_configure
from envelopes.models import AuditEvent, Step
from envelopes.tasks import sweep_due_steps
from notifications.models import Message, Notice
from notifications.services import ChannelInvalid, channel_create, channels_flush
from tests.approvals.conftest import approval_envelope, post_envelope
from tests.approvals.test_who_decides import _decide
from tests.conftest import logged_in
from tests.reviewers.conftest import token_for
from tests.test_commands_shell import manage
from webhooks.models import OutboxMessage
from webhooks.services import endpoint_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def people(team, make_reviewer) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """fay in finance, lena in leads (the escalation's group), rita in neither."""
    found = {name: make_reviewer(name, "reviewer") for name in ("fay", "lena", "rita")}
    for name, user in found.items():
        user.email = f"{name}@example.com"
        user.save(update_fields=["email"])
    group_member_add(team=team, name="finance", user=found["fay"])
    group_member_add(team=team, name="leads", user=found["lena"])
    return found


def _escalating_step(agent, team, ref: str = "run_3/wire_1", after_s: int = 600) -> Step:  # type: ignore[no-untyped-def]
    tool_configure(
        team=team,
        name="charge_card",
        settings={"approver_group": "finance", "escalate_after_s": after_s, "escalate_to": "leads"},
        actor="test",
    )
    return post_envelope(agent, approval_envelope(operation_ref=ref))


def test_after_escalate_after_s_the_group_may_decide_too_and_nothing_is_approved(agent, team, people) -> None:
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        step = _escalating_step(agent, team)
    assert step.escalation_due_at == start + timedelta(seconds=600)
    lena = logged_in(people["lena"])
    assert _decide(lena, step, "approve").status_code == 403  # not yet: only finance decides

    with time_machine.travel(start + timedelta(seconds=599), tick=False):
        sweep_due_steps()
    step.refresh_from_db()
    assert step.escalated_to == ""

    with time_machine.travel(start + timedelta(seconds=601), tick=False):
        sweep_due_steps()
        sweep_due_steps()  # a second sweep finds nothing due: one escalation, one audit link
    step.refresh_from_db()
    assert (step.state, step.escalated_to, step.escalation_due_at) == ("awaiting_approval", "leads", None)
    links = AuditEvent.objects.filter(step=step, kind=AuditEvent.Kind.ESCALATION)
    assert [(link.reason, link.data) for link in links] == [("approvers_escalated", {"group": "leads", "after_s": 600})]
    assert not step.decisions.exists()  # widened, never approved by time

    page = lena.get(f"/steps/{step.pk}/").content.decode()
    assert "escalated to leads" in page and 'value="approve"' in page
    rita = logged_in(people["rita"])
    assert "Only finance or leads may approve or reject this step" in rita.get(f"/steps/{step.pk}/").content.decode()
    assert _decide(rita, step, "approve").status_code == 403
    assert _decide(lena, step, "approve", "On call: confirmed with the supplier.").status_code in (200, 303)
    step.refresh_from_db()
    assert (step.state, step.decisions.get().reviewer) == ("retry_ready", people["lena"])
    assert step.escalated_to == ""  # it left awaiting_approval: the widening was of that request


def test_a_step_decided_before_the_time_never_escalates(agent, team, people) -> None:
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        step = _escalating_step(agent, team)
    fay = logged_in(people["fay"])
    assert _decide(fay, step, "reject", "Not this supplier.").status_code in (200, 303)
    step.refresh_from_db()
    assert step.escalation_due_at is None
    with time_machine.travel(start + timedelta(seconds=3600), tick=False):
        sweep_due_steps()
    step.refresh_from_db()
    assert (step.state, step.escalated_to) == ("cancelled", "")
    assert not AuditEvent.objects.filter(step=step, kind=AuditEvent.Kind.ESCALATION).exists()


def test_the_queues_and_the_reviewer_api_list_an_escalated_step_for_the_group(agent, team, people) -> None:
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        step = _escalating_step(agent, team)
    lena = token_for(people["lena"])
    assert lena.queue(**{"for": "me"}).json()["results"] == []
    with time_machine.travel(start + timedelta(seconds=601), tick=False):
        sweep_due_steps()
    assert [s["operation_ref"] for s in lena.queue(**{"for": "me"}).json()["results"]] == [step.operation_ref]
    page = logged_in(people["lena"]).get("/").content.decode()
    row = page.split(f"/steps/{step.pk}/")[1].split("</tr>")[0]
    assert "escalated to leads" in row and "read-only" not in row
    rita = token_for(people["rita"])
    refused = rita.decide(step.operation_ref, {"action": "approve"}, etag=rita.etag(step.operation_ref))
    assert (refused.status_code, refused.json()["group"]) == (403, "finance")
    assert "Only finance or leads may decide this step" in refused.json()["detail"]
    answer = lena.decide(step.operation_ref, {"action": "approve"}, etag=lena.etag(step.operation_ref))
    assert answer.status_code == 201, answer.content


def test_only_the_group_channel_is_told_at_escalation_with_its_members_as_recipients(agent, team, people) -> None:
    everyone = channel_create(team=team, kind="email", target="@reviewers").channel
    leads = channel_create(team=team, kind="email", target="@group:leads").channel
    finance = channel_create(team=team, kind="email", target="@group:finance").channel
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        step = _escalating_step(agent, team)
    told = {(n.channel_id, n.event) for n in Notice.objects.filter(step=step)}
    assert told == {(everyone.pk, "approval.requested"), (finance.pk, "approval.requested")}

    with time_machine.travel(start + timedelta(seconds=601), tick=False):
        sweep_due_steps()
    escalated = Notice.objects.get(step=step, channel=leads)
    assert (escalated.event, escalated.data["escalated_to"]) == ("approval.requested", "leads")
    assert Notice.objects.filter(step=step).count() == 3  # the others are not told twice

    with time_machine.travel(start + timedelta(seconds=602), tick=False):
        channels_flush()  # what the notify task does: the live notices become messages
    message = Message.objects.get(channel=leads)
    assert message.recipients == ["lena@example.com"]
    assert "escalated to: leads" in message.text
    assert Message.objects.get(channel=finance).recipients == ["fay@example.com"]


def test_the_escalation_is_no_webhook(agent, team, people, settings) -> None:  # type: ignore[no-untyped-def]
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = True
    endpoint_create(team=team, url="http://127.0.0.1:9/hook")
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        _escalating_step(agent, team)
    before = OutboxMessage.objects.count()
    with time_machine.travel(start + timedelta(seconds=601), tick=False):
        sweep_due_steps()
    assert OutboxMessage.objects.count() == before  # §5 names the webhook types; this is not one


def test_a_group_channel_must_name_a_group_of_the_team(team) -> None:
    with pytest.raises(ChannelInvalid) as refused:
        channel_create(team=team, kind="email", target="@group:nobody")
    assert refused.value.field == "target"
    with pytest.raises(ChannelInvalid) as refused:
        channel_create(team=team, kind="email", target="@group:Not-A-Name")
    assert refused.value.field == "target"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"escalate_after_s": 60, "escalate_to": "nobody"}, "escalate_to names no group of the team"),
        ({"escalate_after_s": 60, "escalate_to": "Leads"}, "escalate_to must be a group name"),
        ({"escalate_after_s": 60}, "escalate_after_s and escalate_to go together"),
        ({"escalate_to": "leads"}, "escalate_after_s and escalate_to go together"),
        ({"escalate_after_s": 0, "escalate_to": "leads"}, "escalate_after_s must be a whole number"),
    ],
)
def test_escalation_settings_that_break_a_rule_are_refused(team, values: dict[str, Any], message: str) -> None:
    group_create(team=team, name="leads")
    with pytest.raises(ConfigurationError, match=message):
        tool_configure(team=team, name="charge_card", settings=values, actor="test")


@pytest.mark.django_db(transaction=True)
def test_configuretool_sets_escalation_and_refuses_a_missing_group_in_a_fresh_process(team) -> None:
    refused = manage("configuretool", "acme", "charge_card", "escalate_after_s=900", "escalate_to=leads")
    assert refused.returncode != 0
    assert "escalate_to names no group of the team: 'leads'" in refused.stderr
    group_create(team=team, name="leads")
    done = manage("configuretool", "acme", "charge_card", "escalate_after_s=900", "escalate_to=leads")
    assert done.returncode == 0, done.stderr
    cleared = manage("configuretool", "acme", "charge_card", "escalate_after_s=none", "escalate_to=")
    assert cleared.returncode == 0, cleared.stderr


def test_the_tool_page_form_refuses_a_missing_escalation_group(team, make_reviewer) -> None:
    admin = logged_in(make_reviewer("ada", "admin"))
    tool_configure(team=team, name="charge_card", settings={}, actor="test")
    form = {
        "team": "acme",
        "required_approvals": "1",
        "max_attempts": "3",
        "consistency_window_s": "300",
        "verification_deadline_s": "3600",
        "approval_ttl_s": "86400",
        "halt_cooldown_s": "300",
        "escalate_after_s": "900",
        "escalate_to": "nobody",
    }
    answer = admin.post("/tools/charge_card/settings", form, follow=True)
    assert "escalate_to names no group of the team" in answer.content.decode()
    group_create(team=team, name="nobody")
    admin.post("/tools/charge_card/settings", form, follow=True)
    tool = team.tools.get(name="charge_card")
    assert (tool.escalate_after_s, tool.escalate_to) == (900, "nobody")


def test_after_escalation_a_quorum_counts_both_groups_members_once_each(agent, team, people) -> None:
    start = timezone.now()
    tool_configure(team=team, name="charge_card", settings={"required_approvals": 2}, actor="test")
    with time_machine.travel(start, tick=False):
        step = _escalating_step(agent, team)
    fay, lena = logged_in(people["fay"]), logged_in(people["lena"])
    assert _decide(fay, step, "approve").status_code in (200, 303)
    with time_machine.travel(start + timedelta(seconds=601), tick=False):
        sweep_due_steps()
    assert _decide(fay, step, "approve").status_code in (200, 303, 409)  # fay again: still one
    step.refresh_from_db()
    assert step.state == "awaiting_approval"
    assert _decide(lena, step, "approve").status_code in (200, 303)
    step.refresh_from_db()
    assert step.state == "retry_ready"
    assert sorted(d.reviewer.username for d in step.decisions.all()) == ["fay", "lena"]  # type: ignore[union-attr]


def test_a_tool_that_stopped_escalating_leaves_a_due_step_alone(agent, team, people) -> None:
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        step = _escalating_step(agent, team)
    tool_configure(team=team, name="charge_card", settings={"escalate_after_s": None, "escalate_to": ""}, actor="t")
    with time_machine.travel(start + timedelta(seconds=601), tick=False):
        assert sweep_due_steps() == 0
    step.refresh_from_db()
    assert (step.escalation_due_at, step.escalated_to, step.state) == (None, "", "awaiting_approval")
    assert not AuditEvent.objects.filter(step=step, kind=AuditEvent.Kind.ESCALATION).exists()
