"""Beat runs every periodic task the product relies on, and each names a task the worker has."""

from __future__ import annotations

from django.conf import settings

from config.celery import app


def test_every_periodic_task_is_scheduled_and_registered() -> None:
    scheduled = {entry["task"]: entry["schedule"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    app.loader.import_default_modules()
    assert set(scheduled) == {
        "envelopes.tasks.sweep_due_steps",  # timers: retry windows, verification deadlines, approval TTLs
        "envelopes.tasks.seal_audit_chains",
        "webhooks.tasks.deliver_due_messages",
        "metrics.tasks.rollup_metrics",  # without it every metrics read falls back to the envelopes
        "envelopes.tasks.purge_idempotency_keys",
        "envelopes.tasks.purge_quarantine",  # retention (issue 10, point 8)
        "envelopes.tasks.purge_domain_events",
        "webhooks.tasks.purge_webhook_history",
        "notifications.tasks.notify",  # notifying reviewers (§9): reminders, escalations, batched sends
        "notifications.tasks.purge_notification_history",  # its retention
        "approvals.tasks.cancel_held_steps",  # reviewers' cancel-alls, should the ring be lost
    }
    assert set(scheduled) <= set(app.tasks)
    assert scheduled["metrics.tasks.rollup_metrics"] == 60.0
