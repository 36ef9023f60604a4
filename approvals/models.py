"""The human side: who belongs to which team with which role, and what they decided."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class Membership(models.Model):
    class Role(models.TextChoices):
        VIEWER = "viewer"
        REVIEWER = "reviewer"
        ADMIN = "admin"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey("envelopes.Team", on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="membership_unique_user_team"),
            models.CheckConstraint(condition=Q(role__in=["viewer", "reviewer", "admin"]), name="membership_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"

    @property
    def can_decide(self) -> bool:
        return self.role in (self.Role.REVIEWER, self.Role.ADMIN)

    @property
    def can_administer(self) -> bool:
        return self.role == self.Role.ADMIN


class Decision(models.Model):
    """A reviewer's act on a held step. Append-only."""

    class Action(models.TextChoices):
        APPROVE = "approve"
        REJECT = "reject"
        MARK_COMMITTED = "mark_committed"
        PERMIT_RETRY = "permit_retry"
        CANCEL = "cancel"

    step = models.ForeignKey("envelopes.Step", on_delete=models.CASCADE, related_name="decisions")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
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

    class Meta:
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
        ]
        indexes = [models.Index(fields=["step", "action", "decided_at"], name="decision_step_action_idx")]
