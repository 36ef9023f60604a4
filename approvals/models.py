"""A reviewer's cancel-all too large for one request: an outbox row that a task drains."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class CancelAllRequestQuerySet(models.QuerySet["CancelAllRequest"]):
    def pending(self) -> CancelAllRequestQuerySet:
        return self.filter(done_at__isnull=True)

    def claimable(self, now: datetime) -> CancelAllRequestQuerySet:
        """Pending, and not being run: unclaimed, or its runner's lease ran out (it died)."""
        return self.pending().filter(Q(claimed_until__isnull=True) | Q(claimed_until__lte=now))


class CancelAllRequest(models.Model):
    """`tool_cancel_held_steps` of more steps than a page request may cancel, written in the
    decision's transaction, so a broker that is down loses nothing: the task rung on commit, or
    beat's run of it, cancels the steps (approvals.services.cancel_all_requests_drain)."""

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    tool = models.ForeignKey("envelopes.Tool", on_delete=models.CASCADE, related_name="+")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    reason = models.TextField()
    step_ids = models.JSONField()  # the steps held when the decision was made, in their order
    requested_at = models.DateTimeField(default=timezone.now)
    # A runner's lease: until then no other drain starts this request (a second run would be
    # harmless, every step being re-checked under its lock, but wasted).
    claimed_until = models.DateTimeField(null=True, blank=True)
    done_at = models.DateTimeField(null=True, blank=True)
    cancelled = models.PositiveIntegerField(default=0)  # steps its run cancelled

    objects = CancelAllRequestQuerySet.as_manager()

    class Meta:
        indexes = [
            # cancel_all_requests_drain: pending requests, oldest first.
            models.Index(fields=["requested_at"], name="cancelall_pending_idx", condition=Q(done_at__isnull=True)),
        ]

    def __str__(self) -> str:
        return (
            f"cancel-all of {len(self.step_ids)} steps of tool {self.tool_id} ({'done' if self.done_at else 'pending'})"
        )
