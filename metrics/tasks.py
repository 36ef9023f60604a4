"""Thin Celery task: beat runs it every minute (config/settings.py CELERY_BEAT_SCHEDULE)."""

from __future__ import annotations

from celery import shared_task

from .services import metrics_rollup


@shared_task
def rollup_metrics() -> int:
    """Roll the hours that closed since the last run; idempotent, safe to run concurrently."""
    return metrics_rollup()
