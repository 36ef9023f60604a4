"""The core's data: tools, steps and their append-only history (attempts, reviewers' decisions,
the audit log). Teams, members and keys are the accounts app's."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from accounts.models import Team

from .lifecycle import Snapshot
from .states import HELD, TERMINAL, State
from .vocabulary import Category, NextAction, RetryClass, SideEffect

TOOL_NAME_RE = r"^[a-z0-9][a-z0-9_.-]{0,99}$"
CODE_RE = r"^[A-Z][A-Z0-9_]{1,63}$"


class ToolQuerySet(models.QuerySet["Tool"]):
    def for_team(self, team: Team) -> ToolQuerySet:
        return self.filter(team=team)

    def halted(self, now: datetime | None = None) -> ToolQuerySet:
        return self.filter(halted_until__gt=now or timezone.now())


class Tool(models.Model):
    """A named tool an agent calls, with the recovery settings of contract §1. The rows a request
    writes point at it without a database constraint, as at their team (accounts.models.Team)."""

    # No index of its own: tool_unique_name_per_team (team, name) serves every lookup by team, and
    # with both, PostgreSQL's generic plan for the hot path's read of a tool by (team, name)
    # took the lone one and filtered the team's tools by name (issue 14).
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="tools", db_index=False)
    name = models.CharField(max_length=100, validators=[RegexValidator(TOOL_NAME_RE)])
    side_effects = models.BooleanField(default=True)
    required_approvals = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(5)]
    )
    # The reviewer group that alone may approve, reject or edit its held steps ("": any reviewer;
    # contract §12). A rule's `approvers` (Step.approver_group) goes before it.
    approver_group = models.CharField(max_length=40, blank=True, default="", db_default="")
    # Escalation (contract §12): a step still waiting for approval escalate_after_s after it
    # began may also be decided by the group escalate_to, which is notified. Both or neither.
    escalate_after_s = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    escalate_to = models.CharField(max_length=40, blank=True, default="", db_default="")
    # What an expired request for approval becomes: cancelled (v1) or escalated (contract §12).
    on_approval_expiry = models.CharField(
        max_length=8, choices=[("cancel", "cancel"), ("escalate", "escalate")], default="cancel", db_default="cancel"
    )
    max_attempts = models.PositiveIntegerField(default=3, validators=[MinValueValidator(1)])
    consistency_window_s = models.PositiveIntegerField(default=300)
    verification_deadline_s = models.PositiveIntegerField(default=3600)
    approval_ttl_s = models.PositiveIntegerField(default=86400, validators=[MinValueValidator(1)])
    halt_cooldown_s = models.PositiveIntegerField(default=300)
    safe_detail_keys = models.JSONField(default=list, blank=True)
    strict_codes = models.BooleanField(default=False)
    # The circuit: open while halted_until is in the future (scope: service, contract §3).
    halted_until = models.DateTimeField(null=True, blank=True)
    halted_reason = models.CharField(max_length=64, blank=True)
    halted_at = models.DateTimeField(null=True, blank=True)
    audit_seq = models.PositiveIntegerField(default=0)
    audit_head = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = ToolQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="tool_unique_name_per_team"),
            models.CheckConstraint(
                condition=Q(required_approvals__gte=1, required_approvals__lte=5), name="tool_required_approvals_1_to_5"
            ),
            models.CheckConstraint(condition=Q(max_attempts__gte=1), name="tool_max_attempts_positive"),
            models.CheckConstraint(
                condition=Q(on_approval_expiry__in=["cancel", "escalate"]), name="tool_on_approval_expiry_valid"
            ),
            models.CheckConstraint(
                condition=Q(escalate_after_s__isnull=True, escalate_to="")
                | (Q(escalate_after_s__gte=1) & ~Q(escalate_to="")),
                name="tool_escalation_both_or_neither",
            ),
            models.CheckConstraint(
                condition=Q(verification_deadline_s__gte=models.F("consistency_window_s")),
                name="tool_deadline_not_below_window",
            ),
        ]
        indexes = [
            # The halted-tools queue and the sweep that closes elapsed circuits.
            models.Index(fields=["halted_until"], name="tool_halted_idx", condition=Q(halted_until__isnull=False)),
        ]

    def __str__(self) -> str:
        return self.name

    def is_halted(self, now: datetime | None = None) -> bool:
        return self.halted_until is not None and self.halted_until > (now or timezone.now())


class ErrorCode(models.Model):
    """A documented error code: per tool, or team-wide when `tool` is empty."""

    Category = Category
    RetryClass = RetryClass
    NextAction = NextAction
    SideEffect = SideEffect

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="error_codes")
    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, null=True, blank=True, related_name="error_codes")
    code = models.CharField(max_length=64, validators=[RegexValidator(CODE_RE)])
    category = models.CharField(max_length=16, choices=Category.choices)
    retry_class = models.CharField(max_length=16, choices=RetryClass.choices)
    next_action = models.CharField(max_length=20, choices=NextAction.choices)
    side_effect = models.CharField(max_length=16, choices=SideEffect.choices, default="unknown")
    description = models.TextField(blank=True)
    hint = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tool", "code"], condition=Q(tool__isnull=False), name="errorcode_unique_per_tool"
            ),
            models.UniqueConstraint(
                fields=["team", "code"], condition=Q(tool__isnull=True), name="errorcode_unique_team_wide"
            ),
            models.CheckConstraint(condition=Q(category__in=Category.values), name="errorcode_category_valid"),
            models.CheckConstraint(condition=Q(retry_class__in=RetryClass.values), name="errorcode_retry_class_valid"),
            models.CheckConstraint(condition=Q(next_action__in=NextAction.values), name="errorcode_next_action_valid"),
            models.CheckConstraint(condition=Q(side_effect__in=SideEffect.values), name="errorcode_side_effect_valid"),
        ]

    def __str__(self) -> str:
        return self.code


class StepQuerySet(models.QuerySet["Step"]):
    def for_team(self, team: Team) -> StepQuerySet:
        return self.filter(team=team)

    def held(self) -> StepQuerySet:
        return self.filter(state__in=[s.value for s in HELD])

    def due(self, now: datetime) -> StepQuerySet:
        return self.filter(due_at__lte=now)


class Step(models.Model):
    """One agent operation, named by the agent's operation_ref, and where its recovery stands."""

    # No index of its own: team leads the unique (team, operation_ref) and every other step index;
    # a bare team_id index only tempted the planner away from the unique lookup for a team its
    # statistics did not know yet (bench/README.md, "Flat with size").
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="steps", db_index=False, db_constraint=False)
    tool = models.ForeignKey(Tool, on_delete=models.RESTRICT, related_name="steps", db_constraint=False)
    operation_ref = models.CharField(max_length=200)
    state = models.CharField(max_length=20, choices=[(s.value, s.value) for s in State])
    reason = models.CharField(max_length=40)
    correlation_id = models.CharField(max_length=200, blank=True)
    run_id = models.CharField(max_length=200, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_fingerprint = models.CharField(max_length=64, blank=True)
    last_attempt_reported = models.BooleanField(default=True)
    approval_fingerprint = models.CharField(max_length=64, blank=True)
    # The binding's standing (lifecycle.Snapshot): under review since review_started_at (the
    # quorum counts approvals from then), or approved at approved_at until approval_lapses_at.
    review_started_at = models.DateTimeField(null=True, blank=True)
    approved_at = models.DateTimeField(null=True, blank=True)
    approval_lapses_at = models.DateTimeField(null=True, blank=True)
    not_before = models.DateTimeField(null=True, blank=True)
    trusted_after = models.DateTimeField(null=True, blank=True)
    deadline = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    # The next timer: the current state's (not_before, deadline or expiry), or the approval's
    # lapse if sooner; swept by beat (Snapshot.due_at).
    due_at = models.DateTimeField(null=True, blank=True)
    state_entered_at = models.DateTimeField(default=timezone.now)
    # A hold by rule (contract §11): the approvals it needs and the group that gives them (null
    # and "": the tool's), and what rule or grant last held, refused or approved the step (§4
    # `policy`; policy.explain writes it).
    approvals_needed = models.PositiveSmallIntegerField(null=True, blank=True)
    approver_group = models.CharField(max_length=40, blank=True)
    # Escalation of a request for approval (contract §12): due at escalation_due_at (set when the
    # step starts waiting for approval, swept by beat), then escalated_to names the group that may
    # also decide until the step leaves awaiting_approval.
    escalation_due_at = models.DateTimeField(null=True, blank=True)
    escalated_to = models.CharField(max_length=40, blank=True, default="", db_default="")
    policy = models.JSONField(null=True, blank=True)
    # The API key of the last call to the gate: a grant of scope `key` made from the step is its.
    last_key_id = models.BigIntegerField(null=True, blank=True)
    last_envelope = models.ForeignKey("Envelope", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    version = models.PositiveIntegerField(default=1)
    audit_seq = models.PositiveIntegerField(default=0)
    audit_head = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # The W3C trace of the agent's latest call on the step (§13): its trace id, and its span (the
    # traceparent's parent id) that the worker's spans link to. "": no call carried one.
    trace_id = models.CharField(max_length=32, blank=True, default="", db_default="")
    trace_parent_id = models.CharField(max_length=16, blank=True, default="", db_default="")

    objects = StepQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "operation_ref"], name="step_unique_operation_ref_per_team"),
            models.CheckConstraint(condition=Q(state__in=[s.value for s in State]), name="step_state_valid"),
            # Under review is not approved (contract §3): a binding is one or the other, and an
            # approval always has its lapse.
            models.CheckConstraint(
                condition=Q(review_started_at__isnull=True) | Q(approved_at__isnull=True),
                name="step_binding_under_review_or_approved",
            ),
            models.CheckConstraint(
                condition=Q(approved_at__isnull=True, approval_lapses_at__isnull=True)
                | Q(approved_at__isnull=False, approval_lapses_at__isnull=False),
                name="step_approval_lapses",
            ),
        ]
        indexes = [
            # The review queues: held steps of a team by state, oldest first.
            models.Index(
                fields=["team", "state", "state_entered_at"],
                name="step_held_queue_idx",
                condition=Q(state__in=sorted(s.value for s in HELD)),
            ),
            # The dashboard's queue pages (approvals.queries.step_queue): one team's queue in the
            # queue's order (NULLs last), read a page at a time from the index, never sorted whole.
            models.Index(
                fields=["team", "expires_at", "state_entered_at", "id"],
                name="step_queue_approvals_idx",
                condition=Q(state=State.AWAITING_APPROVAL.value),
            ),
            models.Index(
                fields=["team", "deadline", "state_entered_at", "id"],
                name="step_queue_verifications_idx",
                condition=Q(state=State.VERIFYING.value),
            ),
            models.Index(
                fields=["team", "state_entered_at", "id"],
                name="step_queue_escalations_idx",
                condition=Q(state=State.ESCALATED.value),
            ),
            models.Index(
                fields=["team", "state_entered_at", "id"],
                name="step_queue_waiting_idx",
                condition=Q(state__in=[State.NEEDS_INPUT.value, State.WAITING_RETRY.value]),
            ),
            # The timer sweep (services.due_step_ids, step_fire_timer): steps whose due time has
            # come, a state's timer or an approval's lapse (Snapshot.due_at, the sooner of both).
            models.Index(fields=["due_at"], name="step_due_idx", condition=Q(due_at__isnull=False)),
            # The escalation sweep (services.due_escalation_ids).
            models.Index(
                fields=["escalation_due_at"],
                name="step_escalation_due_idx",
                condition=Q(escalation_due_at__isnull=False),
            ),
            # GET /steps?tool=&state= and the tool page.
            models.Index(fields=["team", "tool", "state"], name="step_team_tool_state_idx"),
            # GET /steps (cursor over created_at, id).
            models.Index(fields=["team", "-created_at", "-id"], name="step_team_created_idx"),
            # Search and GET /steps?run_id=.
            models.Index(fields=["team", "run_id"], name="step_team_run_idx"),
            models.Index(fields=["team", "correlation_id"], name="step_team_correlation_idx"),
        ]

    def __str__(self) -> str:
        return self.operation_ref

    @property
    def held(self) -> bool:
        return self.state in HELD

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def approvals_required(self) -> int:
        """How many distinct approvals release the step: a rule's hold's, else the tool's."""
        return self.approvals_needed or self.tool.required_approvals

    @property
    def held_for(self) -> str:
        """The group that alone may approve, reject or edit the step (contract §12): a rule's
        hold's, else the tool's ("": any reviewer). Read from rows the step already has, so a
        check of who may decide is no query per group."""
        return self.approver_group or self.tool.approver_group

    @property
    def deciding_groups(self) -> tuple[str, ...]:
        """The groups whose members may approve, reject or edit it (contract §12): the one it is
        held for and, once escalated, the escalation's. Empty: any reviewer of the team."""
        held_for = self.held_for
        if not held_for:
            return ()
        widened = self.escalated_to if self.state == "awaiting_approval" else ""
        return (held_for, widened) if widened and widened != held_for else (held_for,)

    @property
    def approvals_count_since(self) -> datetime:
        """Since when approvals of its binding count towards the quorum: the binding's review
        (every step in awaiting_approval has one), else the state's entry, the narrower window."""
        return self.review_started_at or self.state_entered_at

    def snapshot(self) -> Snapshot:
        return Snapshot(
            state=State(self.state),
            reason=self.reason,
            attempts=self.attempts,
            max_attempts=self.tool.max_attempts,
            last_fingerprint=self.last_fingerprint,
            last_attempt_reported=self.last_attempt_reported,
            approval_fingerprint=self.approval_fingerprint,
            review_started_at=self.review_started_at,
            approved_at=self.approved_at,
            approval_lapses_at=self.approval_lapses_at,
            not_before=self.not_before,
            trusted_after=self.trusted_after,
            deadline=self.deadline,
            expires_at=self.expires_at,
            halted_until=self.tool.halted_until,
        )


class Attempt(models.Model):
    """One permitted execution of a step's write, granted by the attempt gate."""

    # Indexed by attempt_unique_number_per_step (step, number); no lone index (migration 0009).
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="attempt_set", db_index=False)
    number = models.PositiveIntegerField()
    fingerprint = models.CharField(max_length=64)
    run_id = models.CharField(max_length=200, blank=True)
    correlation_id = models.CharField(max_length=200, blank=True)
    granted_at = models.DateTimeField(default=timezone.now)
    # The tool call's input the agent sent with the request (contract §4, Proposed input), as
    # stored: redacted (envelopes.proposal.input_redact). None: the agent sent no input.
    input = models.JSONField(null=True, blank=True)
    input_redacted = models.BooleanField(default=False)
    # The standing grant this attempt used (contract §11): {id, created_by}; None: none did.
    grant = models.JSONField(null=True, blank=True)
    trace_id = models.CharField(max_length=32, blank=True, default="", db_default="")  # the request's W3C trace (§13)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["step", "number"], name="attempt_unique_number_per_step")]
        ordering = ["number"]


class Decision(models.Model):
    """A reviewer's act on a held step, or a rule's or grant's approval (§11: `reviewer` null,
    `decided_by` naming it). Append-only. Its table is still approvals_decision: the model moved
    here from the approvals app in migration state only."""

    class Action(models.TextChoices):
        APPROVE = "approve"
        REJECT = "reject"
        MARK_COMMITTED = "mark_committed"
        PERMIT_RETRY = "permit_retry"
        CANCEL = "cancel"

    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="decisions")
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", null=True, blank=True
    )
    # Who decided: the reviewer's username, "rule:<name>@v<version>" or "grant:<id>".
    decided_by = models.CharField(max_length=200, blank=True)
    # The away member a delegate decided for (contract §12 "Delegation"): "bob for alice".
    on_behalf_of = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", null=True, blank=True
    )
    action = models.CharField(max_length=20, choices=Action.choices)
    reason = models.TextField(blank=True)
    decided_at = models.DateTimeField(default=timezone.now)
    # An approval's input (contract §3, §4): the fingerprint it approved ("" for other acts, and
    # for an approval of a step that had no fingerprinted attempt; null on the wire); `edited`
    # when the reviewer approved an input of their own, which is then `edited_input` (checked to
    # hold no secret).
    input_fingerprint = models.CharField(max_length=64, blank=True, default="")
    edited = models.BooleanField(default=False)
    edited_input = models.JSONField(null=True, blank=True)
    # The signed receipt of the decision (contract §13; envelopes.receipts); "" on decisions made
    # before receipts existed.
    receipt = models.TextField(blank=True)

    class Meta:
        db_table = "approvals_decision"
        ordering = ["decided_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(action__in=["approve", "reject", "mark_committed", "permit_retry", "cancel"]),
                name="decision_action_valid",
            ),
            models.CheckConstraint(
                condition=Q(action="approve") | Q(input_fingerprint="", edited=False),
                name="decision_input_only_on_approve",
            ),
            models.CheckConstraint(
                condition=Q(edited=False, edited_input__isnull=True)
                | (Q(edited=True, edited_input__isnull=False) & ~Q(input_fingerprint="")),
                name="decision_edited_has_input",
            ),
            # No human: a rule or a grant decided (contract §11), and it is named.
            models.CheckConstraint(
                condition=Q(reviewer__isnull=False)
                | Q(decided_by__startswith="rule:")
                | Q(decided_by__startswith="grant:"),
                name="decision_reviewer_or_policy",
            ),
        ]
        indexes = [models.Index(fields=["step", "action", "decided_at"], name="decision_step_action_idx")]

    @property
    def decider(self) -> str:
        """Who decided, in words: the reviewer's username, or the rule's or grant's name."""
        return self.reviewer.get_username() if self.reviewer is not None else self.decided_by

    @property
    def decider_in_words(self) -> str:
        """The decider, and whom a delegate decided for: "bob for alice"."""
        if self.on_behalf_of is None:
            return self.decider
        return f"{self.decider} for {self.on_behalf_of.get_username()}"


class ProposedInput(models.Model):
    """An input the attempt gate refused with `approval_mismatch`: the step went back to a
    reviewer, and the approval it now waits for binds this input's fingerprint, so the reviewer
    must see it although no attempt was granted (envelopes.proposal.proposal_of). Append-only;
    the input is stored redacted, like an attempt's."""

    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="+")
    fingerprint = models.CharField(max_length=64)
    input = models.JSONField(null=True, blank=True)
    input_redacted = models.BooleanField(default=False)
    proposed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # proposal_of: the step's latest refused input with the fingerprint under review.
            models.Index(fields=["step", "fingerprint", "-id"], name="proposedinput_step_fp_idx"),
        ]


class Envelope(models.Model):
    """One tool result posted for a step. Append-only; untrusted text is stored redacted."""

    # team, tool and step lead envelope_team_correlation_idx, envelope_tool_received_idx and
    # envelope_step_received_idx: no lone indexes, one index insert less each per envelope (0009).
    team = models.ForeignKey(
        Team, on_delete=models.CASCADE, related_name="envelopes", db_index=False, db_constraint=False
    )
    tool = models.ForeignKey(
        Tool, on_delete=models.RESTRICT, related_name="envelopes", db_index=False, db_constraint=False
    )
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="envelopes", db_index=False)
    dialect = models.CharField(max_length=16, default="canonical")
    ok = models.BooleanField()
    code = models.CharField(max_length=64, blank=True)
    category = models.CharField(max_length=16, blank=True)
    commit_state = models.CharField(max_length=16, blank=True)
    retry_directive = models.CharField(max_length=20, blank=True)
    not_before = models.DateTimeField(null=True, blank=True)
    max_attempts_remaining = models.IntegerField(null=True, blank=True)
    next_action = models.CharField(max_length=20, blank=True)
    scope = models.CharField(max_length=16, blank=True)
    resource_id = models.CharField(max_length=500, blank=True)
    safe_details = models.JSONField(default=dict, blank=True)
    dropped_detail_keys = models.JSONField(default=list, blank=True)
    agent_message = models.TextField(blank=True)
    user_message = models.TextField(blank=True)
    correlation_id = models.CharField(max_length=200)
    run_id = models.CharField(max_length=200, blank=True)
    attempt = models.PositiveIntegerField(null=True, blank=True)
    occurred_at = models.DateTimeField()
    received_at = models.DateTimeField(default=timezone.now)
    verification = models.JSONField(null=True, blank=True)
    result_sha256 = models.CharField(max_length=64, blank=True)
    result_size = models.PositiveIntegerField(null=True, blank=True)
    flags = models.JSONField(default=list, blank=True)
    documented = models.BooleanField(default=True)
    step_closed = models.BooleanField(default=False)
    trace_id = models.CharField(max_length=32, blank=True, default="", db_default="")  # the request's W3C trace (§13)

    class Meta:
        indexes = [
            # Metrics by tool and window; the tool page's undocumented codes.
            models.Index(fields=["tool", "received_at"], name="envelope_tool_received_idx"),
            models.Index(fields=["step", "received_at"], name="envelope_step_received_idx"),
            models.Index(fields=["team", "correlation_id"], name="envelope_team_correlation_idx"),
            models.Index(
                fields=["team", "resource_id"],
                name="envelope_team_resource_idx",
                condition=~Q(resource_id=""),
            ),
        ]


class Quarantine(models.Model):
    """A payload that broke the contract: kept, redacted, with the rule it broke."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quarantined")
    tool = models.ForeignKey(Tool, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    tool_name = models.CharField(max_length=100, blank=True)
    operation_ref = models.CharField(max_length=200, blank=True)
    step = models.ForeignKey(Step, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    code = models.CharField(max_length=40)
    errors = models.JSONField(default=list)
    body = models.TextField(blank=True)
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["team", "-received_at"], name="quarantine_team_recent_idx"),
            # envelopes.retention.quarantine_purge: received before the cutoff, oldest first.
            models.Index(fields=["received_at"], name="quarantine_received_idx"),
        ]


class SkippedResource(models.Model):
    """A resource the agent was told to skip (scope: resource), for its run's deliverable."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+", db_constraint=False)
    run_id = models.CharField(max_length=200)
    resource_id = models.CharField(max_length=500)
    correlation_id = models.CharField(max_length=200)
    code = models.CharField(max_length=64)
    operation_ref = models.CharField(max_length=200)
    envelope = models.ForeignKey(Envelope, on_delete=models.CASCADE, related_name="+")
    occurred_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["team", "run_id", "occurred_at"], name="skipped_run_idx")]


class IdempotencyRecord(models.Model):
    """The stored answer to a request sent with an Idempotency-Key, per team and endpoint."""

    # No index but the key's: idempotency_unique_key (team, endpoint, key) serves a team's rows,
    # the purge walks the primary key (envelopes.purging), and every keyed call inserts one entry
    # into each index of this table.
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False)
    endpoint = models.CharField(max_length=40)
    key = models.CharField(max_length=255)
    body_sha256 = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField(null=True, blank=True)  # null while in flight
    response = models.JSONField(null=True, blank=True)
    headers = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "endpoint", "key"], name="idempotency_unique_key")]


# Defined beside the core's other concerns, imported here so that Django registers them.
from .audit_log import AuditEvent, AuditSeal  # noqa: E402, F401  (the audit log's rows: envelopes/audit_log.py)
from .events import DomainEvent  # noqa: E402, F401  (the core's event stream: envelopes/events.py)
