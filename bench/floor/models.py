from django.db import models


class Row(models.Model):
    """One row per request. `operation_ref` is unique, as a step's is per team, so the floor
    pays for the same kind of unique index check the real ingest does."""

    operation_ref = models.CharField(max_length=200, unique=True)
    body = models.JSONField()
    received_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.operation_ref
