"""The step page's decision panel: what the signed-in reviewer may decide on a step (contract
§7, §12: their groups, an away member they decide for), and the quorum's progress."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone

from accounts.away import stand_ins_for
from accounts.groups import GROUP_ACTIONS, groups_of, may_decide
from accounts.models import Membership
from envelopes.lifecycle import allowed_reviewer_actions
from envelopes.models import Decision, Step
from envelopes.proposal import Proposal
from envelopes.states import State

from .inputs import ShownChange, input_changes, input_pretty

# The decision buttons of contract §7, in the order a reviewer reads them.
ACTION_LABELS = {
    "approve": "Approve",
    "reject": "Reject",
    "mark_committed": "Mark committed",
    "permit_retry": "Permit retry",
    "cancel": "Cancel step",
}
ACTION_HELP = {
    "approve": "The agent may make one attempt, with the input that asked for approval.",
    "reject": "Refuse the request: the step is cancelled and the agent must not write.",
    "mark_committed": "The write did happen: the step succeeds and is never retried.",
    "permit_retry": "The write did not happen: the agent may try again. If it did happen, a retry writes twice.",
    "cancel": "Stop the step: it is cancelled and the agent must not write.",
}


@dataclass(frozen=True)
class EditedApproval:
    """An edited input that has approvals but not enough yet (`required_approvals: 2`): another
    reviewer releases the step by approving the same input (contract §3, counted per fingerprint)."""

    fingerprint: str
    edited_input: dict[str, Any]
    approvers: list[str]
    you_approved: bool
    changes: list[ShownChange]  # against the proposal
    more: int

    @property
    def input_text(self) -> str:
        return input_pretty(self.edited_input)


@dataclass(frozen=True)
class DecisionPanel:
    """What the current user may decide on a step, and the four-eyes progress: approvals count
    per input fingerprint, the proposal's and each edited input's apart."""

    step: Step
    can_decide: bool
    actions: list[tuple[str, str, str]]  # (action, label, help)
    required_approvals: int
    approvers: list[str]  # of the proposal's input
    you_approved: bool  # ... of the proposal's input
    edits: list[EditedApproval] = field(default_factory=list)
    can_edit: bool = False  # "Edit and approve" is offered
    held_for: str = ""  # the group that alone approves, rejects or edits (contract §12)
    in_group: bool = True  # the user is in it (or the step has none), or decides for an away member in it
    deciders: str = ""  # the deciding groups in words: "finance", "finance or leads" once escalated
    decides_for: str = ""  # the away member the user decides for, outside the group (contract §12)

    @property
    def approvals_given(self) -> int:
        return len(self.approvers)


def decision_panel(step: Step, membership: Membership | None, user: User, proposal: Proposal | None) -> DecisionPanel:
    allowed = allowed_reviewer_actions(State(step.state))
    approvers: list[str] = []
    you_approved = False
    edits: dict[str, list[Decision]] = {}  # an edited input's fingerprint: its approvals
    if "approve" in allowed:
        approvals = (
            Decision.objects.filter(step=step, action="approve", decided_at__gte=step.approvals_count_since)
            .select_related("reviewer", "on_behalf_of")
            .order_by("decided_at", "id")
        )
        for decision in approvals:
            if decision.edited and decision.edited_input is not None:
                edits.setdefault(decision.input_fingerprint, []).append(decision)
                continue
            name = decision.decider_in_words  # "bob for alice" when a delegate approved
            if name not in approvers:
                approvers.append(name)
            you_approved = you_approved or user.pk in (decision.reviewer_id, decision.on_behalf_of_id)
    can_decide = bool(membership and membership.can_decide)
    held_for = step.held_for
    deciding = step.deciding_groups
    in_group = not deciding or may_decide(
        membership=membership, deciding_groups=deciding, user_groups=groups_of(user=user, team=step.team_id)
    )
    decides_for = ""
    if not in_group and can_decide:  # a delegate decides for an away member of the group (§12)
        stand_ins = stand_ins_for(user=user, team_id=step.team_id, deciding_groups=deciding, now=timezone.now())
        in_group, decides_for = bool(stand_ins), stand_ins[0].get_username() if stand_ins else ""
    # Outside the step's group: what the group keeps is not offered (an admin may still cancel).
    kept = (
        set()
        if in_group
        else GROUP_ACTIONS - ({"cancel"} if membership is not None and membership.can_administer else set())
    )
    actions = [
        (action, ACTION_LABELS[action], ACTION_HELP[action])
        for action in ACTION_LABELS
        if action in allowed and not (action == "approve" and you_approved) and action not in kept
    ]
    pending = []
    for fingerprint, decisions in edits.items():
        edited_input = decisions[0].edited_input
        assert edited_input is not None
        changes, more = input_changes(proposal.input if proposal else None, edited_input)
        names = list(dict.fromkeys(decision.decider_in_words for decision in decisions))
        you = any(user.pk in (decision.reviewer_id, decision.on_behalf_of_id) for decision in decisions)
        pending.append(EditedApproval(fingerprint, edited_input, names, you, changes, more))
    return DecisionPanel(
        step=step,
        can_decide=can_decide,
        actions=actions,
        required_approvals=step.approvals_required,
        approvers=approvers,
        you_approved=you_approved,
        edits=pending,
        can_edit=can_decide and in_group and "approve" in allowed and proposal is not None and proposal.editable,
        held_for=held_for,
        in_group=in_group,
        deciders=" or ".join(deciding),
        decides_for=decides_for,
    )
