"""The envelope's closed vocabularies (contract §2): an error's category, retry class, next
action and side effect, as stored on ErrorCode and read by the schema and the lifecycle."""

from __future__ import annotations

from django.db import models


class Category(models.TextChoices):
    VALIDATION = "validation"
    AUTHORIZATION = "authorization"
    CONFLICT = "conflict"
    DEPENDENCY = "dependency"
    RATE_LIMIT = "rate_limit"
    INTERNAL = "internal"


class RetryClass(models.TextChoices):
    TRANSIENT = "transient"
    CORRECTABLE = "correctable"
    ESCALATE = "escalate"
    ABORT = "abort"


class NextAction(models.TextChoices):
    CORRECT_INPUT = "correct_input"
    WAIT_AND_RETRY = "wait_and_retry"
    VERIFY_OPERATION = "verify_operation"
    REQUEST_APPROVAL = "request_approval"
    ESCALATE = "escalate"
    ABORT = "abort"


class SideEffect(models.TextChoices):
    NONE = "none"
    BEFORE_COMMIT = "before_commit"
    AFTER_COMMIT = "after_commit"
    UNKNOWN = "unknown"
