"""The step page's "Approve and allow similar" (contract §11): an approval that also makes a
standing grant for the calls like the approved one. The `when` starts from the approved input
(`policy.words.grant_when_from_input`), may be edited, and is shown in words before anything is
saved: the form carries the text whose words the page showed (`shown_when`), and an approval
whose `when` differs from it only shows the new words, deciding nothing.

Offered only where a grant could be made: a step awaiting one approval, whose input the agent
sent and the redaction left whole (a `when` over a redacted input would pin nothing)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django import forms
from django.contrib.auth.models import User
from django.db import transaction

from accounts.models import Membership, Team
from envelopes.models import Step
from envelopes.proposal import Proposal
from policy.cel import compile_when
from policy.errors import WhenInvalid
from policy.models import Grant
from policy.words import grant_when_from_input, when_in_words

from .services import DecisionResult, GrantNotMade, step_decide

WHEN_MAX = 2048
EXPIRY_CHOICES = [
    (3600, "1 hour"),
    (4 * 3600, "4 hours"),
    (24 * 3600, "1 day"),
    (3 * 24 * 3600, "3 days"),
    (7 * 24 * 3600, "7 days"),
]
SCOPE_CHOICES = [
    ("run", "this run only"),
    ("key", "this API key"),
    ("team", "any caller in the team"),
]


class GrantForm(forms.Form):
    when = forms.CharField(max_length=WHEN_MAX, strip=False, widget=forms.Textarea)
    shown_when = forms.CharField(max_length=WHEN_MAX, strip=False, required=False)
    scope = forms.ChoiceField(choices=SCOPE_CHOICES, initial="run")
    expires_in_s = forms.TypedChoiceField(choices=EXPIRY_CHOICES, coerce=int, initial=3600)
    max_uses = forms.IntegerField(min_value=1, max_value=1000, initial=20)

    def clean_when(self) -> str:
        when = self.cleaned_data["when"].strip()
        try:
            compile_when(when)
        except WhenInvalid as invalid:
            where = f" at position {invalid.position}" if invalid.position is not None else ""
            raise forms.ValidationError(f"This condition does not compile{where}: {invalid.reason}") from invalid
        return when

    @property
    def words_seen(self) -> bool:
        """The reviewer was shown this very `when` in words (what they approve is what they read)."""
        return self.cleaned_data.get("shown_when", "").strip() == self.cleaned_data.get("when")

    def grant(self) -> dict[str, Any]:
        """The `grant` argument of approvals.services.step_decide."""
        data = self.cleaned_data
        return {
            "when": data["when"],
            "scope": data["scope"],
            "expires_in_s": data["expires_in_s"],
            "max_uses": data["max_uses"],
        }


@dataclass(frozen=True)
class SimilarPanel:
    """What the form shows: the `when` and its words (None: it does not compile), the limits as
    the reviewer left them, and why the last try saved nothing."""

    when: str
    words: str | None
    scopes: list[tuple[str, str]]
    scope: str
    expiries: list[tuple[int, str]]
    expires_in_s: int
    max_uses: object
    reason: str = ""
    form: GrantForm | None = None
    unconfirmed: bool = False  # the `when` changed since its words were shown
    refused: str = ""  # the decision service's refusal (a grant it will not make)


def similar_offered(step: Step, proposal: Proposal | None, *, can_decide: bool) -> bool:
    return (
        can_decide
        and step.state == "awaiting_approval"
        and step.approvals_required < 2
        and proposal is not None
        and proposal.editable
    )


def words_or_none(when: str) -> str | None:
    try:
        compile_when(when)
    except WhenInvalid:
        return None
    return when_in_words(when)


def _scopes(step: Step) -> list[tuple[str, str]]:
    has = {"run": bool(step.run_id), "key": step.last_key_id is not None, "team": True}
    return [(value, label) for value, label in SCOPE_CHOICES if has[value]]


def similar_default(step: Step, proposal: Proposal | None, membership: Membership | None) -> SimilarPanel | None:
    """The form as the step page first shows it, where it is offered."""
    if proposal is None or not similar_offered(step, proposal, can_decide=bool(membership and membership.can_decide)):
        return None
    return similar_panel(proposal, step)


def similar_panel(
    proposal: Proposal, step: Step, form: GrantForm | None = None, *, unconfirmed: bool = False, refused: str = ""
) -> SimilarPanel:
    scopes = _scopes(step)
    if form is None:
        when = grant_when_from_input(proposal.input)
        return SimilarPanel(
            when=when,
            words=words_or_none(when),
            scopes=scopes,
            scope=scopes[0][0],
            expiries=EXPIRY_CHOICES,
            expires_in_s=EXPIRY_CHOICES[0][0],
            max_uses=20,
        )
    data = form.data
    when = str(data.get("when", "")).strip()
    try:
        expires = int(str(data.get("expires_in_s", "")))
    except ValueError:
        expires = EXPIRY_CHOICES[0][0]
    return SimilarPanel(
        when=when,
        words=words_or_none(when),
        scopes=scopes,
        scope=str(data.get("scope", "")),
        expiries=EXPIRY_CHOICES,
        expires_in_s=expires,
        max_uses=str(data.get("max_uses", ""))[:8],
        reason=str(data.get("reason", ""))[:1000],
        form=form,
        unconfirmed=unconfirmed,
        refused=refused,
    )


@dataclass(frozen=True)
class ApprovedWithGrant:
    result: DecisionResult
    grant: Grant


@transaction.atomic
def step_approve_with_grant(
    *,
    team: Team,
    step_id: int,
    actor: User,
    grant: dict[str, Any],
    reason: str = "",
    expected_state: str | None = None,
    expected_since: datetime | None = None,
    edited_input: dict[str, Any] | None = None,
) -> ApprovedWithGrant:
    """"Approve and allow similar" (contract §11): the one decision service's approval with
    `grant`, which makes the grant in the same transaction (a grant that cannot be made,
    GrantNotMade, leaves the step undecided), and the grant it made. `grant`: `{when?, scope,
    expires_in_s?, max_uses?}`; without `when`, equality on the approved input's scalar fields."""
    try:
        result = step_decide(
            team=team,
            step_id=step_id,
            actor=actor,
            action="approve",
            reason=reason,
            expected_state=expected_state,
            expected_since=expected_since,
            edited_input=edited_input,
            grant=grant,
        )
    except GrantNotMade as refused:
        if refused.field == "grant.grant":  # a refusal of the grant as a whole (four eyes)
            refused.field = "grant"
        raise
    made = made_grant(result, actor=actor.get_username())
    assert made is not None  # step_decide made it in this transaction, or raised
    return ApprovedWithGrant(result=result, grant=made)


def made_grant(result: DecisionResult, *, actor: str) -> Grant | None:
    """The grant an approval by `actor` made from the step (the decision's answer shows it)."""
    return (
        Grant.objects.filter(team_id=result.step.team_id, from_step_id=result.step.pk, created_by=actor)
        .order_by("-created_at", "-id")
        .first()
    )
