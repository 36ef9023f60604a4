"""Who may decide what, for the queues (contract §12 "For you"): the steps waiting for approval
that the signed-in reviewer may approve or reject, first in the queues and counted in the nav.
Each answer costs the same few queries however many groups and members a team has."""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Case, CharField, F, Q, QuerySet, When
from django.utils import timezone

from accounts.away import groups_with_stand_ins
from accounts.groups import may_decide
from accounts.models import Membership
from envelopes.models import Step
from envelopes.states import State


def user_groups(user: User | AnonymousUser) -> dict[int, frozenset[str]]:
    """The group names the user decides in per team id, in one query: their own, and those of
    the away members they are the delegate of (contract §12 "Delegation", accounts.away)."""
    return groups_with_stand_ins(user, timezone.now())


def with_held_group(steps: QuerySet[Step]) -> QuerySet[Step]:
    """Annotate `held_group`: the rule's group, else the tool's (Step.held_for in SQL)."""
    return steps.annotate(
        held_group=Case(
            When(approver_group="", then=F("tool__approver_group")),
            default=F("approver_group"),
            output_field=CharField(),
        )
    )


def decidable_q(memberships: Iterable[Membership], groups: dict[int, frozenset[str]]) -> Q:
    """The steps (annotated by with_held_group) these memberships may approve or reject."""
    q = Q(pk__in=[])
    for membership in memberships:
        if membership.can_decide:
            names = sorted(groups.get(membership.team_id, ()))
            q |= Q(team_id=membership.team_id) & (
                Q(held_group="") | Q(held_group__in=names) | Q(state=State.AWAITING_APPROVAL, escalated_to__in=names)
            )
    return q


def for_you(memberships: list[Membership], groups: dict[int, frozenset[str]]) -> QuerySet[Step]:
    """The steps waiting for approval that the user may decide."""
    waiting = Step.objects.filter(
        team_id__in=[m.team_id for m in memberships if m.can_decide], state=State.AWAITING_APPROVAL
    )
    return with_held_group(waiting).filter(decidable_q(memberships, groups))


def mark_rows(rows: list[Step], memberships: list[Membership], groups: dict[int, frozenset[str]]) -> list[Step]:
    """Set `you_decide` on each shown step and put those first, the queue's order kept within
    each part (no query: the rows have their tool)."""
    deciding = {m.team_id: m for m in memberships if m.can_decide}
    for step in rows:
        step.you_decide = may_decide(  # type: ignore[attr-defined]
            membership=deciding.get(step.team_id),
            deciding_groups=step.deciding_groups,
            user_groups=groups.get(step.team_id, frozenset()),
        )
    return sorted(rows, key=lambda step: not step.you_decide)  # type: ignore[attr-defined]
