"""The reviewer API (contract v1.1, §10): a team's queues, a step with its ETag, and decisions.

    from holdpoint_sdk import Reviewer

    with Reviewer("https://holdpoint.example", token="hpr_...") as reviewer:
        seen = reviewer.step("payments", "run_81/step_4")
        reviewer.decide("payments", "run_81/step_4", action="approve", etag=seen.etag,
                        reason="checked with the customer")

A reviewer token (`hpr_...`, made at /account/tokens/) acts as its user, with the user's
memberships and roles. A decision names the ETag of the step version the reviewer looked at
(`If-Match`): if the step changed since, Holdpoint answers 412 (`StepChanged`) and decides
nothing. The `holdpoint` command (holdpoint_sdk.reviewer_cli) is built on this class.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote

import httpx

from .async_client import AsyncHoldpoint
from .client import Holdpoint
from .client_base import ApiCall, drop_none
from .types import DecisionAction, DecisionAnswer, QueueKind, Step, StepPage


def team_path(team: str) -> str:
    return "/api/v1/teams/" + quote(team, safe="")


def team_step_path(team: str, operation_ref: str) -> str:
    """The reviewer API's path of a step; the operation_ref is URL-encoded (`run_81%2Fstep_4`)."""
    return team_path(team) + "/steps/" + quote(operation_ref, safe="")


@dataclass(frozen=True)
class RuleSet:
    """A team's rule set as read (contract §11): its version, its rules in evaluation order, and
    the ETag a replacement names."""

    version: int
    rules: list[dict[str, Any]]
    etag: str


@dataclass(frozen=True)
class ReviewedStep:
    """A step as the reviewer read it, with the ETag a decision on that version names."""

    step: Step
    etag: str


def _decision_call(
    team: str,
    operation_ref: str,
    *,
    action: DecisionAction,
    etag: str,
    reason: str | None,
    input: Mapping[str, Any] | None = None,
    grant: Mapping[str, Any] | None = None,
) -> ApiCall:
    body = drop_none({"action": action, "reason": reason, "input": input, "grant": grant})
    return ApiCall(
        "POST",
        team_step_path(team, operation_ref) + "/decisions",
        body=json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8"),
        headers={"Content-Type": "application/json", "If-Match": etag},
        idempotent=False,  # a decision sent twice would be refused 412 at best: never resend
        expect=(201,),
    )


class Reviewer:
    """A client for the reviewer API. Reads are retried on 502/503/504 and connection errors;
    a decision is never sent twice (a lost answer: read the step again)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 10.0,
        max_retries: int = 2,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not token:
            raise ValueError("a reviewer token (hpr_...) is required")
        # The agent client's transport (retries, problem+json to typed errors), with this token.
        self._client = Holdpoint(base_url, token, timeout=timeout, max_retries=max_retries, transport=transport)
        self.base_url = self._client.base_url

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Reviewer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def queue_page(
        self, team: str, *, kind: QueueKind = "approvals", limit: int | None = None, cursor: str | None = None
    ) -> StepPage:
        """One page of a team's queue, oldest held first."""
        params = drop_none({"kind": kind, "limit": limit, "cursor": cursor})
        return cast(StepPage, self._client._fetch(ApiCall("GET", team_path(team) + "/queue", params=params)))

    def queue(
        self, team: str, *, kind: QueueKind = "approvals", page_size: int | None = None, for_me: bool = False
    ) -> Iterator[Step]:
        """Every step of a team's queue, following the cursor from page to page. `for_me`: only
        the steps waiting for approval that the token's user may decide (their groups, §12)."""
        params: dict[str, Any] | None = drop_none({"kind": kind, "limit": page_size, "for": "me" if for_me else None})
        while params is not None:
            call = ApiCall("GET", team_path(team) + "/queue", params=params)
            page = cast(StepPage, self._client._fetch(call))
            yield from page["results"]
            params = self._client._next_params(page["next"])

    def step(self, team: str, operation_ref: str) -> ReviewedStep:
        """A step of the team (the §4 shape) and its ETag."""
        response = self._client._send(ApiCall("GET", team_step_path(team, operation_ref), expect=(200,)))
        return ReviewedStep(step=cast(Step, response.json()), etag=response.headers.get("ETag", ""))

    def decide(
        self,
        team: str,
        operation_ref: str,
        *,
        action: DecisionAction,
        etag: str,
        reason: str | None = None,
        input: Mapping[str, Any] | None = None,
        grant: Mapping[str, Any] | None = None,
    ) -> DecisionAnswer:
        """Decide on the step version `etag` names. `input`: an edited input, for `approve`;
        `grant`: with `approve`, a standing grant for similar calls (`{when?, scope, expires_in_s,
        max_uses}`; without `when`, the server prefills it from the approved input).

        Raises StepChanged (412) when the step moved since, Unauthorized (401/403), NotFound,
        Conflict (409 `decision_not_allowed`), ValidationFailed (422, e.g. a missing reason)."""
        call = _decision_call(team, operation_ref, action=action, etag=etag, reason=reason, input=input, grant=grant)
        return cast(DecisionAnswer, self._client._fetch(call))

    # --- rules and grants (contract §11) ---------------------------------------------------------

    def rules(self, team: str) -> RuleSet:
        """The team's rule set and its ETag."""
        response = self._client._send(ApiCall("GET", team_path(team) + "/rules", expect=(200,)))
        body = response.json()
        return RuleSet(version=body["version"], rules=body["rules"], etag=response.headers.get("ETag", ""))

    def rules_replace(self, team: str, rules: list[Mapping[str, Any]], *, etag: str) -> RuleSet:
        """Replace the whole set, if it is still the version `etag` names (an admin's token).
        Raises StepChanged (412 `rules_changed`) when someone saved since, ValidationFailed (422
        `rules_invalid`, `errors` naming `rules[i].when`, the position and the reason)."""
        call = ApiCall(
            "PUT",
            team_path(team) + "/rules",
            body=json.dumps({"rules": list(rules)}, separators=(",", ":"), ensure_ascii=False).encode("utf-8"),
            headers={"Content-Type": "application/json", "If-Match": etag},
            idempotent=False,
            expect=(200,),
        )
        response = self._client._send(call)
        body = response.json()
        return RuleSet(version=body["version"], rules=body["rules"], etag=response.headers.get("ETag", ""))

    def rules_test(self, team: str, rules: list[Mapping[str, Any]]) -> dict[str, Any]:
        """The test against history of a draft set: counts per outcome, what would change."""
        call = ApiCall(
            "POST",
            team_path(team) + "/rules/test",
            body=json.dumps({"rules": list(rules)}, separators=(",", ":"), ensure_ascii=False).encode("utf-8"),
            headers={"Content-Type": "application/json"},
            expect=(200,),
        )
        return cast(dict[str, Any], self._client._fetch(call))


class AsyncReviewer:
    """The reviewer API's step read and decision, awaited (holdpoint-mcp decides in its client
    with these). The same rules as `Reviewer`: reads retried, a decision never sent twice."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 10.0, max_retries: int = 2) -> None:
        if not token:
            raise ValueError("a reviewer token (hpr_...) is required")
        self._client = AsyncHoldpoint(base_url, token, timeout=timeout, max_retries=max_retries)
        self.base_url = self._client.base_url

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> AsyncReviewer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def step(self, team: str, operation_ref: str) -> ReviewedStep:
        """A step of the team (the §4 shape) and its ETag."""
        response = await self._client._send(ApiCall("GET", team_step_path(team, operation_ref), expect=(200,)))
        return ReviewedStep(step=cast(Step, response.json()), etag=response.headers.get("ETag", ""))

    async def decide(
        self,
        team: str,
        operation_ref: str,
        *,
        action: DecisionAction,
        etag: str,
        reason: str | None = None,
    ) -> DecisionAnswer:
        """Decide on the step version `etag` names; the errors of `Reviewer.decide`."""
        call = _decision_call(team, operation_ref, action=action, etag=etag, reason=reason)
        return cast(DecisionAnswer, await self._client._fetch(call))
