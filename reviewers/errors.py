"""The reviewer API's refusals (contract §10). Each is a HoldpointError, so the API's one
exception handler (envelopes.apikit.problems) answers it as problem+json with its stable `code`."""

from __future__ import annotations

from typing import Any

from envelopes.errors import HoldpointError


class TeamNotFound(HoldpointError):
    # An unknown team and a team the user is not a member of look the same (§4: never 403).
    status, code, title = 404, "not_found", "No such team"


class RoleRequired(HoldpointError):
    status, code, title = 403, "role_required", "Only reviewers and admins of this team may decide"


class ReviewerTokenRequired(HoldpointError):
    status, code, title = 403, "reviewer_token_required", "Agent API keys can never decide"


class PreconditionRequired(HoldpointError):
    status, code, title = 428, "precondition_required", "If-Match with the step's ETag is required"


class StepChanged(HoldpointError):
    """The API's "already decided": the step moved since the ETag the reviewer decided on."""

    status, code, title = 412, "step_changed", "The step changed since that ETag"

    def __init__(self, detail: str, *, etag: str, **extra: Any) -> None:
        super().__init__(detail, **extra)
        self.etag = etag
        self.headers = {"ETag": etag}


class DecisionNotAllowed(HoldpointError):
    status, code, title = 409, "decision_not_allowed", "The step's state does not allow this decision"


class DecisionInvalid(HoldpointError):
    """A decision body that breaks a rule (a missing reason, an edited input refused)."""

    status, code, title = 422, "decision_invalid", "The decision breaks a rule"

    def __init__(self, detail: str, *, field: str, rule: str, code: str = "") -> None:
        super().__init__(detail, errors=[{"field": field, "rule": rule}])
        if code:
            self.code = code


class AdminRequired(HoldpointError):
    status, code, title = 403, "role_required", "Only admins of this team may export its audit log"


class AwayInvalid(HoldpointError):
    """An away setting that breaks a rule (contract §12 "Delegation"): `errors` names the field."""

    status, code, title = 422, "away_invalid", "The away setting breaks a rule"

    def __init__(self, detail: str, *, field: str, rule: str) -> None:
        super().__init__(detail, errors=[{"field": field, "rule": rule}])
