"""Reviewer tokens and deciding outside the dashboard (contract §10).

`decide_with_etag` is the door for every decider that is not the dashboard form (the reviewer
API, Slack's Approve): it checks the ETag against the step's locked row and then calls
`approvals.services.step_decide`, the one decision service the form calls too, so roles,
reasons, four-eyes, the input binding and the audit link are one implementation.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from accounts.models import TEAM_SLUG_RE, Membership, Team
from approvals.services import (
    REASON_REQUIRED,
    DecisionRefused,
    DecisionResult,
    GrantNotMade,
    InputRefused,
    step_decide,
)
from approvals.similar import step_approve_with_grant
from envelopes.errors import HoldpointError, StepNotFound
from envelopes.lifecycle import allowed_reviewer_actions
from envelopes.models import Decision, Step
from envelopes.presenters import step_representation
from envelopes.rfc3339 import rfc3339
from envelopes.services import step_lock_for_decision
from envelopes.states import State
from policy.models import Grant
from policy.words import when_in_words

from .errors import (
    DecisionInvalid,
    DecisionNotAllowed,
    PreconditionRequired,
    RoleRequired,
    StepChanged,
    TeamNotFound,
)
from .models import ReviewerToken

logger = logging.getLogger(__name__)

# `last_used_at` is written at most this often per token: a busy bot's every request would
# otherwise be a write on the same row.
LAST_USED_RESOLUTION = timedelta(minutes=1)
NAME_MAX = 100


# --- tokens ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NewReviewerToken:
    token: ReviewerToken
    raw: str  # shown once, never stored


def reviewer_token_create(*, user: User, name: str, expires_at: datetime | None = None) -> NewReviewerToken:
    """A new personal token for `user`; the raw token is in the answer only (stored hashed).
    Without `expires_at` it expires after HOLDPOINT_REVIEWER_TOKEN_DAYS (contract §12: 90 days
    unless set otherwise; 0: never)."""
    if expires_at is None and settings.HOLDPOINT_REVIEWER_TOKEN_DAYS:
        expires_at = timezone.now() + timedelta(days=settings.HOLDPOINT_REVIEWER_TOKEN_DAYS)
    name = name.strip()
    if not name or len(name) > NAME_MAX or not name.isprintable():
        raise ValueError(f"a token's name is 1..{NAME_MAX} printable characters")
    if expires_at is not None and expires_at <= timezone.now():
        raise ValueError("a token's expiry must be in the future")
    raw = ReviewerToken.generate()
    token = ReviewerToken.objects.create(
        user=user,
        name=name,
        prefix=raw[: ReviewerToken.PREFIX_LENGTH],
        token_hash=ReviewerToken.hash_token(raw),
        expires_at=expires_at,
    )
    logger.info("reviewer token %s created by %s", token.pk, user.get_username())
    return NewReviewerToken(token=token, raw=raw)


def reviewer_tokens_revoke(tokens: QuerySet[ReviewerToken], *, now: datetime | None = None) -> int:
    """Revoke the active tokens among `tokens`; returns how many. Tokens are looked up on every
    request, never cached: the next request with one of them answers 401."""
    return tokens.filter(revoked_at__isnull=True).update(revoked_at=now or timezone.now())


def reviewer_token_revoke(*, user: User, token_id: int) -> bool:
    """Revoke one of the user's own tokens; False when it is not theirs or already revoked."""
    revoked = reviewer_tokens_revoke(ReviewerToken.objects.for_user(user.pk).filter(pk=token_id)) == 1
    if revoked:
        logger.info("reviewer token %s revoked by %s", token_id, user.get_username())
    return revoked


def reviewer_token_authenticate(raw: str, *, now: datetime | None = None) -> ReviewerToken | None:
    """The active token `raw` names, with its user; None for an unknown, expired or revoked
    token or an inactive user. Logs refusals by the token's id, never the token."""
    now = now or timezone.now()
    # token_hash is unique: a slice, not .first(), which would add an ORDER BY.
    found = list(ReviewerToken.objects.select_related("user").filter(token_hash=ReviewerToken.hash_token(raw))[:1])
    if not found:
        logger.info("reviewer API: unknown token refused")
        return None
    token = found[0]
    if not token.is_active(now) or not token.user.is_active:
        why = "revoked" if token.revoked_at else "expired" if token.user.is_active else "of an inactive user"
        logger.info("reviewer API: token %s refused (%s)", token.pk, why)
        return None
    if token.last_used_at is None or token.last_used_at <= now - LAST_USED_RESOLUTION:
        # Conditional, so that concurrent requests of the same minute write the row once.
        ReviewerToken.objects.filter(pk=token.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - LAST_USED_RESOLUTION)
        ).update(last_used_at=now)
        token.last_used_at = now
    return token


# --- deciding with an ETag ---------------------------------------------------------------------


def step_etag(step: Step) -> str:
    """The step's entity tag: the same as the agent API's (`GET /api/v1/steps/{ref}`) and the one
    Slack messages carry. The version grows with every write to the step."""
    return f'"{step.pk}.{step.version}"'


def etag_matches(if_match: str, step: Step) -> bool:
    """Strong comparison (RFC 9110 §13.1.1): a weak tag never matches, nor does `*`: deciding
    needs the version the reviewer saw."""
    current = step_etag(step)
    return any(tag.strip() == current for tag in if_match.split(","))


def team_membership(*, user: User, team_slug: str) -> Membership:
    """The user's membership in the team; TeamNotFound when the team is unknown or not theirs."""
    membership = None
    if re.fullmatch(TEAM_SLUG_RE, team_slug):
        membership = Membership.objects.select_related("team").filter(user=user, team__slug=team_slug).first()
    if membership is None:
        raise TeamNotFound(f"No team {team_slug[:64]!r} among your teams.")
    return membership


def decider_membership(*, user: User, team_slug: str) -> Membership:
    """The user's membership in the team, when it may decide: TeamNotFound, else RoleRequired."""
    membership = team_membership(user=user, team_slug=team_slug)
    if not membership.can_decide:
        raise RoleRequired(f"Your role in {team_slug} is {membership.role}: only reviewers and admins decide.")
    return membership


def step_of_team(team: Team, operation_ref: str) -> Step:
    step = None
    if 1 <= len(operation_ref) <= 200 and operation_ref.isprintable():
        step = Step.objects.for_team(team).filter(operation_ref=operation_ref).first()
    if step is None:
        raise StepNotFound("No such step in this team.")
    return step


def decide_with_etag(
    *,
    user: User,
    team_slug: str,
    operation_ref: str,
    action: str,
    etag: str,
    reason: str = "",
    edited_input: dict[str, Any] | None = None,
    grant: dict[str, Any] | None = None,
) -> DecisionResult:
    """Decide on a step as `user`, only if it is still the version `etag` names. `grant`: with
    an approval, a standing grant for similar calls (§11; `when` prefilled from the approved
    input when the body has none).

    `etag`: the If-Match value (one or more entity tags). Raises, in this order: TeamNotFound
    (404), RoleRequired (403), StepNotFound (404), DecisionInvalid (422: unknown action, missing
    reason, input for another action than approve, an edited input refused), PreconditionRequired
    (428: no ETag), StepChanged (412: the step moved since; the API's "already decided"),
    DecisionNotAllowed (409: the state does not allow the action, or this reviewer already
    approved). Nothing is written when it raises.
    """
    try:
        return _decide_with_etag(
            user=user,
            team_slug=team_slug,
            operation_ref=operation_ref,
            action=action,
            etag=etag,
            reason=reason,
            edited_input=edited_input,
            grant=grant,
        )
    except HoldpointError as refused:
        decision_refusal_log(user=user, team_slug=team_slug, action=action, refused=refused)
        raise


def grant_representation(grant: Grant) -> dict[str, Any]:
    """A grant in the decision's answer and the CLI's line (contract §11's Grant)."""
    return {
        "id": grant.pk,
        "tool": grant.tool,
        "when": grant.when,
        "when_in_words": when_in_words(grant.when),
        "scope": grant.scope,
        "created_by": grant.created_by,
        "created_at": rfc3339(grant.created_at),
        "expires_at": rfc3339(grant.expires_at),
        "max_uses": grant.max_uses,
        "uses": grant.uses,
        "from_step": grant.from_step_id,
    }


def decision_refusal_log(*, user: User, team_slug: str, action: str, refused: HoldpointError) -> None:
    """Who, where and why a decision was refused; never the credential the request came with."""
    logger.info(
        "decision %s by %s on a step of %r refused: %s %s",
        action if action in Decision.Action.values else "(unknown action)",
        user.get_username(),
        team_slug,
        refused.status,
        refused.code,
    )


def _decide_with_etag(
    *,
    user: User,
    team_slug: str,
    operation_ref: str,
    action: str,
    etag: str,
    reason: str,
    edited_input: dict[str, Any] | None,
    grant: dict[str, Any] | None,
) -> DecisionResult:
    team = decider_membership(user=user, team_slug=team_slug).team
    step = step_of_team(team, operation_ref)
    reason = reason.strip()
    if action not in Decision.Action.values:
        raise DecisionInvalid(f"Unknown action {action!r}.", field="action", rule="enum")
    if action in REASON_REQUIRED and not reason:
        raise DecisionInvalid(
            "A reason is required for this decision.", field="reason", rule="required", code="reason_required"
        )
    if edited_input is not None and action != "approve":
        raise DecisionInvalid("An edited input goes with approve only.", field="input", rule="approve_only")
    if grant is not None and action != "approve":
        raise DecisionInvalid("A grant goes with approve only.", field="grant", rule="approve_only")
    if not etag.strip() or etag.strip() == "*":
        raise PreconditionRequired("Send If-Match with the ETag of the step you decided on (GET the step).")
    with transaction.atomic():
        locked = step_lock_for_decision(team=team, step_id=step.pk)
        # Compared on the locked row: of two deciders holding the same ETag, the second waits
        # for the first to commit and then sees a newer version.
        if not etag_matches(etag, locked):
            raise StepChanged(
                f"The step changed since that ETag: it is now {locked.state.replace('_', ' ')} ({locked.reason}).",
                etag=step_etag(locked),
                step=step_representation(locked),
            )
        if action not in allowed_reviewer_actions(State(locked.state)):
            raise DecisionNotAllowed(
                f"A step that is {locked.state.replace('_', ' ')} cannot be decided with {action}."
            )
        try:
            if grant is not None:
                result = step_approve_with_grant(
                    team=team,
                    step_id=locked.pk,
                    actor=user,
                    grant=grant,
                    reason=reason,
                    expected_state=locked.state,
                    expected_since=locked.state_entered_at,
                    edited_input=edited_input,
                ).result
            else:
                result = step_decide(
                    team=team,
                    step_id=locked.pk,
                    actor=user,
                    action=action,
                    reason=reason,
                    expected_state=locked.state,
                    expected_since=locked.state_entered_at,
                    edited_input=edited_input,
                )
        except PermissionError as refused:
            # A step held for a group names it (contract §12), so a client can say who decides.
            group = getattr(refused, "group", None)
            raise RoleRequired(str(refused), **({"group": group} if group else {})) from refused
        except DecisionRefused as refused:
            if refused.already_decided:
                raise DecisionNotAllowed(str(refused)) from refused
            if isinstance(refused, GrantNotMade):
                raise DecisionInvalid(
                    str(refused), field=refused.field, rule=refused.rule, code="grant_refused"
                ) from refused
            if isinstance(refused, InputRefused):
                raise DecisionInvalid(
                    str(refused), field=refused.field, rule=refused.rule, code="input_refused"
                ) from refused
            # A refusal with a code of its own (denied_by_rule, grant_refused: §11) says it.
            code = getattr(refused, "code", "")
            raise DecisionInvalid(
                str(refused), field=getattr(refused, "field", "body"), rule=code or "refused", code=code
            ) from refused
    logger.info("%s decided %s on step %s of %s", user.get_username(), action, locked.pk, team.slug)
    return result
