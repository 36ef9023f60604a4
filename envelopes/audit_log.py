"""The audit log's rows: the links of the hash chains (one per step, tool or team policy) and the
team-level seals over their heads. How links are made and checked: envelopes/audit.py."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class AuditEvent(models.Model):
    """One link of a hash chain: every transition, refusal and decision, never edited.

    Each step (and each tool, for its circuit) has its own chain, so unrelated steps never
    wait on each other; AuditSeal rows chain the heads per team.
    """

    class Kind(models.TextChoices):
        TRANSITION = "transition"
        REFUSAL = "refusal"
        DECISION = "decision"
        CIRCUIT = "circuit"
        SETTINGS = "settings"  # a tool's recovery settings changed: who, and from what to what
        POLICY = "policy"  # a team's rules or grants changed (its "policy:<team>" chain, no tool)
        ESCALATION = "escalation"  # a request for approval widened to its tool's escalate_to group

    # team leads audit_team_step_seq_idx: no lone index.
    team = models.ForeignKey(
        "accounts.Team", on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    chain = models.CharField(max_length=40)  # "step:<id>", "tool:<id>" or "policy:<team id>"
    seq = models.PositiveIntegerField()
    # step and tool lead audit_step_seq_idx and audit_tool_kind_time_idx: no lone indexes (0009).
    step = models.ForeignKey(
        "envelopes.Step", on_delete=models.CASCADE, null=True, blank=True, related_name="audit_events", db_index=False
    )
    # Null on a team's policy chain only (rules and grants belong to no one tool).
    tool = models.ForeignKey(
        "envelopes.Tool",
        on_delete=models.CASCADE,
        related_name="+",
        db_index=False,
        db_constraint=False,
        null=True,
        blank=True,
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    actor = models.CharField(max_length=200)
    before = models.CharField(max_length=20, blank=True)
    after = models.CharField(max_length=20, blank=True)
    reason = models.CharField(max_length=40, blank=True)
    # Seconds the step spent in `before` when that state was held (pending-recovery metric).
    held_seconds = models.FloatField(null=True, blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["chain", "seq"], name="audit_unique_link")]
        indexes = [
            # Metrics: transitions and refusals per tool and window.
            models.Index(fields=["tool", "kind", "created_at"], name="audit_tool_kind_time_idx"),
            models.Index(fields=["step", "seq"], name="audit_step_seq_idx"),
            # The step page's timeline: the step's links newest first (created_at desc, id desc),
            # read a page at a time without scanning the step's older links.
            models.Index(fields=["step", "created_at", "id"], name="audit_step_time_idx"),
            # The audit export (envelopes.audit_export): a team's chains in (step, seq) order, a
            # page at a time (its tools' chains: step IS NULL).
            models.Index(fields=["team", "step", "seq"], name="audit_team_step_seq_idx"),
        ]


class AuditSeal(models.Model):
    """A team-level link that records the heads of the chains that moved since the last seal."""

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    seq = models.PositiveIntegerField()
    heads = models.JSONField(default=dict)  # {chain: [seq, hash]}
    through_event_id = models.BigIntegerField(default=0)  # the last AuditEvent this seal covers
    created_at = models.DateTimeField(default=timezone.now)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "seq"], name="auditseal_unique_link")]
