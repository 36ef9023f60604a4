"""Holdpoint's Python SDK: the API client, typed errors, a guard around tool calls, and the
reviewer API's client (`Reviewer`, and the `holdpoint` command built on it).

from holdpoint_sdk import Holdpoint

hp = Holdpoint("https://holdpoint.example", api_key="hp_...")
with hp.guard(tool="send_email", operation_ref=ref, input=message) as guard:
    outcome = guard.call(mailer.send, message)
print(outcome.action, outcome.step_url)
"""

__version__ = "0.1.0"

from .async_client import AsyncHoldpoint
from .client import Holdpoint
from .client_base import ConditionalStep, step_path
from .envelopes import (
    Failure,
    ToolError,
    canonical_json,
    failure_for_exception,
    failure_for_response,
    field_named_in,
    input_fingerprint,
    parse_retry_after,
)
from .errors import (
    ApprovedInputNotPassed,
    AttemptRefused,
    Conflict,
    DecisionTimeout,
    HoldpointError,
    HoldpointUnavailable,
    NotFound,
    ReceiptInvalid,
    ReportNotDelivered,
    ServerError,
    StepChanged,
    Throttled,
    Unauthorized,
    ValidationFailed,
    WebhookVerificationError,
)
from .guard import AsyncGuard, Guard, Outcome, new_operation_ref
from .reviewer import AsyncReviewer, ReviewedStep, Reviewer
from .webhooks import sign_webhook, verify_webhook

__all__ = [
    "ApprovedInputNotPassed",
    "AsyncGuard",
    "AsyncHoldpoint",
    "AsyncReviewer",
    "AttemptRefused",
    "ConditionalStep",
    "Conflict",
    "DecisionTimeout",
    "Failure",
    "Guard",
    "Holdpoint",
    "HoldpointError",
    "HoldpointUnavailable",
    "NotFound",
    "Outcome",
    "ReceiptInvalid",
    "ReportNotDelivered",
    "ReviewedStep",
    "Reviewer",
    "ServerError",
    "StepChanged",
    "Throttled",
    "ToolError",
    "Unauthorized",
    "ValidationFailed",
    "WebhookVerificationError",
    "canonical_json",
    "failure_for_exception",
    "failure_for_response",
    "field_named_in",
    "input_fingerprint",
    "new_operation_ref",
    "parse_retry_after",
    "sign_webhook",
    "step_path",
    "verify_webhook",
]
