"""Reviewer writes: memberships, decisions and (team admins) API keys. A decision is one more
event for the step's state machine (envelopes.services), so locking, audit and webhooks stay in
one place."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.away import stand_ins_for
from accounts.groups import GROUP_ACTIONS, groups_of, may_decide
from accounts.models import ApiKey, GroupMembership, Membership, Team
from accounts.services import NewApiKey, api_key_create, api_keys_revoke
from envelopes import policy_acts
from envelopes import services as step_services
from envelopes.errors import InputInvalid, StepNotFound
from envelopes.lifecycle import allowed_reviewer_actions
from envelopes.models import Decision, Step, Tool
from envelopes.proposal import input_check, input_fingerprint, input_secret_check, proposal_of
from envelopes.states import State
from outbound.doorbell import doorbell_answered, doorbell_ring
from policy.errors import GrantRefused
from policy.services import grant_create
from policy.words import grant_when_from_input

from . import quorum
from .models import CancelAllRequest

logger = logging.getLogger(__name__)

REASON_REQUIRED = frozenset({"reject", "cancel", "mark_committed", "permit_retry"})


class DecisionRefused(Exception):
    """The decision cannot be made; the message says why in words a reviewer understands."""

    def __init__(self, message: str, *, already_decided: bool = False) -> None:
        super().__init__(message)
        self.already_decided = already_decided


class InputRefused(DecisionRefused):
    """An approval's edited input that cannot be approved: `field` and `rule` name why (rules:
    `type`, `max_depth`, `max_bytes`, `canonical`, `no_secret`, `storable` from the input checks,
    `not_editable` when the proposal is absent or redacted, `not_approve` on another act)."""

    def __init__(self, message: str, *, rule: str, field: str = "input") -> None:
        super().__init__(message)
        self.field = field
        self.rule = rule


class DeniedByRule(DecisionRefused):
    """An approval (plain or edited) of an input that an enforced deny rule matches (contract
    §11): refused in every channel with `code` denied_by_rule, naming the rule."""

    code = "denied_by_rule"

    def __init__(self, message: str, *, rule: dict[str, Any]) -> None:
        super().__init__(message)
        self.rule = rule


class GrantNotMade(DecisionRefused):
    """An approval asked to make a grant that cannot be made (`field`, `rule` as
    policy.errors.GrantRefused says): nothing is decided."""

    code = "grant_refused"

    def __init__(self, message: str, *, field: str, rule: str) -> None:
        super().__init__(message)
        self.field = field
        self.rule = rule


class ToolNoLongerHalted(DecisionRefused):
    """A cancel-all found the tool resumed: before it started, or part way."""


def membership_for(*, user: User, team: Team) -> Membership | None:
    return Membership.objects.filter(user=user, team=team).select_related("user").first()


@dataclass(frozen=True)
class DecisionResult:
    decision: Decision
    step: Step
    transitioned: bool
    approvals_so_far: int = 0


class GroupRequired(PermissionError):
    """A decision on a step held for a group (contract §12) by someone outside it: every channel
    answers it as role_required, naming `group` (the one it is held for; once escalated, the
    message names the escalation's group too)."""

    def __init__(self, groups: tuple[str, ...]) -> None:
        group, deciders = groups[0], " or ".join(groups)
        escalated = f", escalated to {groups[1]}" if len(groups) > 1 else ""
        super().__init__(f"Only {deciders} may decide this step: it is held for the group {group}{escalated}.")
        self.group = group


def _require_reviewer(user: User, team: Team) -> Membership:
    membership = membership_for(user=user, team=team)
    if membership is None or not membership.can_decide:
        raise PermissionError("Only reviewers and admins of this team may decide.")
    return membership


def _require_group(*, membership: Membership, step: Step, action: str) -> None:
    """Refuse a decision the step's groups keep (one query when the step has a group, none else)."""
    deciding = step.deciding_groups
    if not deciding or action not in GROUP_ACTIONS:
        return
    if action == "cancel" and (membership.can_administer or step.state != State.AWAITING_APPROVAL):
        return
    user_groups = groups_of(user=membership.user, team=step.team_id)
    if not may_decide(membership=membership, deciding_groups=deciding, user_groups=user_groups):
        raise GroupRequired(deciding)


@transaction.atomic
def step_decide(
    *,
    team: Team,
    step_id: int,
    actor: User,
    action: str,
    reason: str = "",
    expected_state: str | None = None,
    expected_since: datetime | None = None,
    edited_input: dict[str, Any] | None = None,
    grant: dict[str, Any] | None = None,
    now: datetime | None = None,
) -> DecisionResult:
    """Record a reviewer's decision and, when it is final, move the step. The one decision
    service: the dashboard's forms, the reviewer API and chat buttons all call it.

    No approval of an input an enforced deny rule matches (DeniedByRule, contract §11). With an
    approval, `grant` (`{when?, scope, expires_in_s?, max_uses?}`) also makes a standing grant
    for calls like it in the same transaction ("Approve and allow similar"; `when` defaults to
    equality on the approved input's scalar fields; GrantNotMade when it cannot be made).

    `expected_state` and `expected_since` are the state the reviewer saw and when the step
    entered it: if the step moved since (even out of that state and back), nothing happens and
    the reviewer is told it was already decided.

    An approval binds the input under review (the step's `approval_fingerprint`), or with
    `edited_input` the reviewer's own input (contract §3, §7): checked like the gate's input and
    refused when the redaction would change it (InputRefused), offered only when the proposal was
    sent and not redacted. Approvals count per fingerprint: with `required_approvals: 2` the step
    is released when two reviewers approved the same input, and an edit starts a new count. Only
    the approval that completes the count is fed to the machine, which marks the binding approved
    (until then it is under review, wherever the step goes: contract §3 v1.2).
    """
    membership = _require_reviewer(actor, team)
    reason = reason.strip()
    if action in REASON_REQUIRED and not reason:
        raise DecisionRefused("A reason is required for this decision.")
    edited_fingerprint = _edited_input_fingerprint(action, edited_input)
    now = now or timezone.now()  # a past `now` only for the demo's history
    step = step_services.step_lock_for_decision(team=team, step_id=step_id)
    if (
        (expected_state and step.state != expected_state)
        or (expected_since is not None and step.state_entered_at != expected_since)
        or action not in allowed_reviewer_actions(State(step.state))
    ):
        raise DecisionRefused(
            f"Already decided: the step is now {step.state.replace('_', ' ')} ({step.reason}).",
            already_decided=True,
        )
    try:
        _require_group(membership=membership, step=step, action=action)
        stand_ins: list[User] = []
    except GroupRequired:
        # Delegation (§12): outside the step's groups, one decides for an away member in them.
        stand_ins = stand_ins_for(user=actor, team_id=step.team_id, deciding_groups=step.deciding_groups, now=now)
        if not stand_ins:
            raise
    on_behalf_of = stand_ins[0] if stand_ins else None
    username = actor.get_username()
    approvals_so_far = 0
    fingerprint, edited = "", False
    approved_input: Any = None
    if action == "approve":
        fingerprint = step.approval_fingerprint
        if edited_fingerprint is not None:
            proposal = proposal_of(step)
            if proposal is None or not proposal.editable:
                raise InputRefused(
                    "This step's input cannot be edited: the agent sent none, or it was redacted.",
                    rule="not_editable",
                )
            if edited_fingerprint != fingerprint:  # an "edit" that changes nothing approves the proposal
                fingerprint, edited = edited_fingerprint, True
        # The approvals of this input since its review started (contract §3): a round trip out of
        # awaiting_approval and back (a malformed envelope, a permitted retry) keeps them, a new
        # request for approval or another input starts a new count.
        earlier = Decision.objects.filter(
            step=step, action="approve", decided_at__gte=step.approvals_count_since, input_fingerprint=fingerprint
        )
        if step.deciding_groups:  # only the groups' members count, or approvals for one (one subquery)
            members = GroupMembership.objects.filter(
                group__team_id=step.team_id, group__name__in=step.deciding_groups
            ).values("user_id")
            earlier = earlier.filter(Q(reviewer__in=members) | Q(on_behalf_of__in=members))
        counted = list(earlier.values_list("reviewer_id", "on_behalf_of_id"))
        # A person counts once towards the quorum, as themselves or for someone (approvals.quorum).
        counting = quorum.first_counting(counted, actor.pk, [u.pk for u in stand_ins] or [None])
        if counting is None:
            raise DecisionRefused(
                "You already approved this input"
                + (f" (for {on_behalf_of.get_username()})" if on_behalf_of is not None else "")
                + "; a second reviewer must approve it.",
                already_decided=True,
            )
        on_behalf_of = next((u for u in stand_ins if u.pk == counting[1]), None)
        approvals_so_far = quorum.approvals_counted(counted) + 1
        approved_input = _approved_input(step, edited_input if edited else None)
        denied = policy_acts.review_denial(team=team, step=step, input=approved_input, now=now)
        if denied.effect is not None:
            rule = denied.rule
            raise DeniedByRule(
                f"The rule {rule.name} (version {rule.version}) refuses this input ({rule.when}): "
                "it cannot be approved; the agent must change it.",
                rule={"name": rule.name, "version": rule.version},
            )
    elif grant is not None:
        raise GrantNotMade("Only an approval can make a grant.", field="grant", rule="not_approve")
    # Written with the step's change, in the same plan (envelopes.services.step_decision_apply).
    decision = Decision(
        step=step,
        reviewer=actor,
        decided_by=username,
        on_behalf_of=on_behalf_of,
        action=action,
        reason=reason,
        decided_at=now,
        input_fingerprint=fingerprint,
        edited=edited,
        edited_input=edited_input if edited else None,
    )
    # A permitted retry of an input under review sends it back to review (§3 v1.2): the team's
    # rules are asked of it there, as of any step that starts waiting for approval (§11).
    consult = (
        policy_acts.consult_for_review(team=team, step=step, now=now)
        if action == "permit_retry" and step.snapshot().under_review
        else None
    )
    transitioned = step_services.step_decision_apply(
        step=step,
        decision=decision,
        final=action != "approve" or approvals_so_far >= step.approvals_required,
        actor=username,
        now=now,
        edited=edited,
        policy=consult,
    )
    if consult is not None:
        step_services.hold_act(step=step, consult=consult, now=now)
    if grant is not None:
        _grant_from_approval(team=team, step=step, grant=grant, approved_input=approved_input, actor=username)
    return DecisionResult(decision=decision, step=step, transitioned=transitioned, approvals_so_far=approvals_so_far)


def _approved_input(step: Step, edited_input: dict[str, Any] | None) -> Any:
    """The input an approval approves: the reviewer's edit, else the proposal as stored."""
    if edited_input is not None:
        return edited_input
    proposal = proposal_of(step)
    return proposal.input if proposal is not None else None


def _grant_from_approval(*, team: Team, step: Step, grant: dict[str, Any], approved_input: Any, actor: str) -> None:
    scope = grant.get("scope", "run")
    scope_value = {"run": step.run_id, "key": str(step.last_key_id or ""), "team": ""}.get(str(scope), "")
    when = grant.get("when") or grant_when_from_input(approved_input if isinstance(approved_input, dict) else None)
    try:
        grant_create(
            team=team,
            tool=step.tool.name,
            when=when,
            scope=scope,
            scope_value=scope_value,
            expires_in_s=grant.get("expires_in_s"),
            max_uses=grant.get("max_uses"),
            actor=actor,
            from_step_id=step.pk,
            required_approvals=step.approvals_required,
        )
    except GrantRefused as refused:
        raise GrantNotMade(str(refused), field=f"grant.{refused.field}", rule=refused.rule) from refused


def _edited_input_fingerprint(action: str, edited_input: dict[str, Any] | None) -> str | None:
    """The edited input's fingerprint, once it passed the gate's checks and holds no secret."""
    if edited_input is None:
        return None
    if action != "approve":
        raise InputRefused("Only an approval can carry an edited input.", rule="not_approve")
    try:
        input_check(edited_input, field="input")
        input_secret_check(edited_input, field="input")
    except InputInvalid as invalid:
        raise InputRefused(invalid.detail, field=invalid.field, rule=invalid.rule) from invalid
    return input_fingerprint(edited_input)


def tool_resume_by_reviewer(*, team: Team, tool: Tool, actor: User, reason: str = "") -> Tool:
    _require_reviewer(actor, team)
    if tool.team_id != team.pk:
        raise PermissionError("Another team's tool.")
    return step_services.tool_resume(
        tool=tool, actor=actor.get_username(), reviewer=actor.get_username(), reason=reason or "resumed_by_reviewer"
    )


# A cancel-all of more held steps than this runs in a Celery task (approvals.tasks): a request
# cancelling thousands of steps, one transaction each, would outlive the web worker's timeout.
CANCEL_ALL_INLINE_LIMIT = 100
CANCEL_ALL_TASK = "approvals.tasks.cancel_held_steps"
# A drain claims a request for this long; a runner that died meanwhile leaves it to the next.
CANCEL_ALL_LEASE = timedelta(minutes=10)


@dataclass(frozen=True)
class CancelHeldResult:
    cancelled: int  # steps cancelled by this call
    queued: int = 0  # held steps left to the background task (approvals.tasks.cancel_held_steps)
    resumed_midway: bool = False  # the tool was resumed (or its cooldown ran out) part way


def tool_cancel_held_steps(*, team: Team, tool: Tool, actor: User, reason: str) -> CancelHeldResult:
    """One decision for a service-wide incident: cancel every held step of the tool.

    The halt is re-checked with the tool row locked: a tool resumed since the page was drawn
    is "already decided" and nothing is cancelled. Each step then gets its own decision,
    transition and audit link, in its own transaction that checks the halt again, so a step
    decided meanwhile by someone else is skipped and a resume part way stops the rest. The
    decision speaks for the steps held when it was made, not for steps held later. More than
    CANCEL_ALL_INLINE_LIMIT steps are left to a task: a CancelAllRequest written in this
    transaction, which the task rung on commit drains (beat runs it too, should the ring fail).
    """
    _require_reviewer(actor, team)
    reason = reason.strip()
    if not reason:
        raise DecisionRefused("A reason is required for this decision.")
    with transaction.atomic():
        _lock_halted_tool(tool)
        held_ids = list(
            Step.objects.for_team(team)
            .held()
            .filter(tool=tool)
            .order_by("state_entered_at", "id")
            .values_list("pk", flat=True)
        )
        if len(held_ids) > CANCEL_ALL_INLINE_LIMIT:
            CancelAllRequest.objects.create(team=team, tool=tool, actor=actor, reason=reason, step_ids=held_ids)
            transaction.on_commit(cancel_all_ring)
            logger.info(
                "cancel-all of %d steps of %s (team %s) by %s queued",
                len(held_ids),
                tool.name,
                team.slug,
                actor.get_username(),
            )
            return CancelHeldResult(cancelled=0, queued=len(held_ids))
    return tool_cancel_steps_while_halted(team=team, tool=tool, actor=actor, reason=reason, step_ids=held_ids)


def cancel_all_ring() -> None:
    """Ask a worker to drain the cancel-all requests now (outbound.doorbell). Never raises: the
    request is committed, and beat's run of the task drains it if the broker is down."""
    doorbell_ring(CANCEL_ALL_TASK, quiet_s=1.0)


def cancel_all_requests_drain() -> int:
    """Run every pending CancelAllRequest, oldest first; the steps cancelled. Each is claimed
    under `select_for_update(skip_locked=True)` and marked done after its run, so two drains
    never run one request, and a redelivered or repeated drain cancels nothing twice (a run cut
    short is run again once its lease ends: every step is re-checked under its lock)."""
    doorbell_answered(CANCEL_ALL_TASK)
    cancelled = 0
    while True:
        with transaction.atomic():
            now = timezone.now()
            request = (
                CancelAllRequest.objects.claimable(now)
                .select_for_update(skip_locked=True)
                .select_related("team", "tool", "actor")
                .order_by("requested_at", "id")
                .first()
            )
            if request is None:
                return cancelled
            request.claimed_until = now + CANCEL_ALL_LEASE
            request.save(update_fields=["claimed_until"])
        # Outside the claim's transaction: each step is cancelled in a transaction of its own.
        try:
            result = tool_cancel_steps_while_halted(
                team=request.team,
                tool=request.tool,
                actor=request.actor,
                reason=request.reason,
                step_ids=list(request.step_ids),
            )
            done = result.cancelled
        except PermissionError:  # the reviewer left the team since: the decision no longer stands
            logger.warning("cancel-all %s dropped: %s is no longer a reviewer", request.pk, request.actor)
            done = 0
        CancelAllRequest.objects.filter(pk=request.pk).update(done_at=timezone.now(), cancelled=done)
        cancelled += done


def tool_cancel_steps_while_halted(
    *, team: Team, tool: Tool, actor: User, reason: str, step_ids: list[int]
) -> CancelHeldResult:
    """Cancel the given steps of a halted tool, one transaction each (see above). Safe to run
    again: a step no longer held is skipped."""
    _require_reviewer(actor, team)
    cancelled = 0
    for step_id in step_ids:
        try:
            with transaction.atomic():
                # The step first, then the tool: the order an envelope that halts the tool takes.
                step_services.step_lock_for_decision(team=team, step_id=step_id)
                _lock_halted_tool(tool)
                result = step_decide(team=team, step_id=step_id, actor=actor, action="cancel", reason=reason)
        except ToolNoLongerHalted:
            logger.info("cancel-all of %s stopped after %d steps: the tool was resumed", tool.name, cancelled)
            return CancelHeldResult(cancelled=cancelled, resumed_midway=True)
        except (DecisionRefused, StepNotFound):
            continue
        cancelled += int(result.transitioned)
    return CancelHeldResult(cancelled=cancelled)


def _lock_halted_tool(tool: Tool) -> None:
    if not Tool.objects.select_for_update().get(pk=tool.pk).is_halted():
        # A stale page, or a resume part way: the incident is over, so one decision no longer
        # speaks for every step.
        raise ToolNoLongerHalted(
            f"Already decided: {tool.name} is no longer halted. Decide its held steps one by one.",
            already_decided=True,
        )


# --- a team's API keys (team admins) -------------------------------------------------------------


def _require_admin(user: User, team: Team) -> None:
    membership = membership_for(user=user, team=team)
    if membership is None or not membership.can_administer:
        raise PermissionError("Only admins of this team may manage its API keys.")


def api_key_create_by_admin(*, team: Team, actor: User, name: str) -> NewApiKey:
    """A new key for the team; the raw key is in the answer only (stored hashed)."""
    _require_admin(actor, team)
    created = api_key_create(team=team, name=name)
    logger.info("api key %s… created for team %s by %s", created.api_key.prefix, team.slug, actor.get_username())
    return created


def api_key_revoke_by_admin(*, team: Team, key_id: int, actor: User) -> bool:
    """Revoke one of the team's keys; False when it was already revoked."""
    _require_admin(actor, team)
    revoked = api_keys_revoke(ApiKey.objects.filter(team=team, pk=key_id)) == 1
    if revoked:
        logger.info("api key %s revoked in team %s by %s", key_id, team.slug, actor.get_username())
    return revoked
