"""Under review is not approved (contract §3 v1.2): a step's binding gets its standing.

Before this migration `approval_fingerprint` meant "under review" in awaiting_approval and
"approved" elsewhere. The data step gives every open step the standing it really had:

- awaiting_approval: under review since the state's entry (the window approvals counted in);
- elsewhere, from the step's own audit chain, which records every transition: if the step last
  left awaiting_approval by a reviewer's approval (reason `approved`) and no attempt was granted
  since, its binding is approved, at that transition's time, lapsing approval_ttl_s later (an
  approval older than that lapses at the next sweep, as the contract now says); if it last left
  it any other way (a malformed envelope escalated it), the binding is still under review, since
  its last entry into awaiting_approval. "A fingerprint outside awaiting_approval is approved" is
  wrong for exactly those steps, the four-eyes bypass this change closes (an escalated step may
  hold one approval of two, or, permitted, sit in retry_ready with it), and it would miss a
  step asked about with no fingerprinted attempt, which binds "" but is under review all the same;
- a binding outside awaiting_approval that no transition out of it explains keeps its old
  meaning, approved, from now (its time unknown, it lapses approval_ttl_s after the migration).
"""

from datetime import timedelta
from typing import Any

from django.db import migrations, models
from django.db.models import Exists, F, OuterRef, Q, Subquery
from django.utils import timezone

CLOSED_OR_UNDER_REVIEW = ["succeeded", "cancelled", "failed", "awaiting_approval"]
BATCH = 1000


def give_bindings_their_standing(apps: Any, schema_editor: Any) -> None:
    Step = apps.get_model("envelopes", "Step")
    AuditEvent = apps.get_model("envelopes", "AuditEvent")
    now = timezone.now()
    Step.objects.filter(state="awaiting_approval").update(review_started_at=F("state_entered_at"))

    links = AuditEvent.objects.filter(step=OuterRef("pk"), kind="transition").order_by("-seq")
    exits = links.filter(before="awaiting_approval").exclude(after="awaiting_approval")
    steps = (
        Step.objects.exclude(state__in=CLOSED_OR_UNDER_REVIEW)
        .filter(~Q(approval_fingerprint="") | Exists(exits))
        .annotate(
            exit_seq=Subquery(exits.values("seq")[:1]),
            exit_reason=Subquery(exits.values("reason")[:1]),
            exit_at=Subquery(exits.values("created_at")[:1]),
            entered_at=Subquery(links.filter(after="awaiting_approval").values("created_at")[:1]),
            granted_seq=Subquery(links.filter(reason="attempt_granted").values("seq")[:1]),
        )
        .select_related("tool")
        .order_by("pk")
    )
    changed = []
    for step in steps.iterator(chunk_size=BATCH):
        if step.exit_seq is not None and step.granted_seq is not None and step.granted_seq > step.exit_seq:
            continue  # a granted attempt used the binding since
        if step.exit_seq is None:
            step.approved_at = now
        elif step.exit_reason == "approved":
            step.approved_at = step.exit_at
        else:
            step.review_started_at = step.entered_at or step.exit_at
        if step.approved_at is not None:
            step.approval_lapses_at = step.approved_at + timedelta(seconds=step.tool.approval_ttl_s)
            step.due_at = min(filter(None, (step.due_at, step.approval_lapses_at)))
        changed.append(step)
        if len(changed) >= BATCH:
            Step.objects.bulk_update(changed, ["review_started_at", "approved_at", "approval_lapses_at", "due_at"])
            changed = []
    if changed:
        Step.objects.bulk_update(changed, ["review_started_at", "approved_at", "approval_lapses_at", "due_at"])


class Migration(migrations.Migration):
    dependencies = [("envelopes", "0010_step_queue_page_indexes")]

    operations = [
        migrations.AddField(
            model_name="step", name="review_started_at", field=models.DateTimeField(blank=True, null=True)
        ),
        migrations.AddField(model_name="step", name="approved_at", field=models.DateTimeField(blank=True, null=True)),
        migrations.AddField(
            model_name="step", name="approval_lapses_at", field=models.DateTimeField(blank=True, null=True)
        ),
        migrations.RunPython(give_bindings_their_standing, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="step",
            constraint=models.CheckConstraint(
                condition=models.Q(("review_started_at__isnull", True), ("approved_at__isnull", True), _connector="OR"),
                name="step_binding_under_review_or_approved",
            ),
        ),
        migrations.AddConstraint(
            model_name="step",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("approval_lapses_at__isnull", True), ("approved_at__isnull", True)),
                    models.Q(("approval_lapses_at__isnull", False), ("approved_at__isnull", False)),
                    _connector="OR",
                ),
                name="step_approval_lapses",
            ),
        ),
    ]
