"""The quorum's rule for delegates (contract §12): each approval counts its persons, the
reviewer and whom they decided for, and no person counts twice, so a delegate never makes two
approvals of one (as themselves and for someone, for two people, or before the one they stood
in for approves too)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from approvals.quorum import approvals_counted, counts_towards, first_counting

BOB, ALICE, CAROL, DAVE = 1, 2, 3, 4


@pytest.mark.parametrize(
    ("counted", "approval", "counts"),
    [
        ([], (BOB, None), True),
        ([(BOB, None)], (BOB, ALICE), False),  # bob as himself, then for alice
        ([(BOB, ALICE)], (ALICE, None), False),  # bob for alice, then alice herself
        ([(BOB, ALICE)], (BOB, DAVE), False),  # bob for alice, then for dave
        ([(BOB, ALICE)], (DAVE, BOB), False),  # bob for alice, then dave for bob
        ([(ALICE, None)], (BOB, ALICE), False),  # alice, then bob for her
        ([(BOB, ALICE)], (CAROL, None), True),
        ([(BOB, ALICE), (CAROL, None)], (DAVE, None), True),
        ([(None, None)], (BOB, None), True),  # a rule's approval names no person
    ],
)
def test_a_person_counts_once(counted: list, approval: tuple, counts: bool) -> None:  # type: ignore[type-arg]
    assert counts_towards(counted, approval) is counts


def test_a_delegate_for_two_counts_for_the_one_not_counted_yet() -> None:
    # alice approved before leaving; bob stands in for alice and dave: his approval is for dave
    assert first_counting([(ALICE, None)], BOB, [ALICE, DAVE]) == (BOB, DAVE)
    assert first_counting([(BOB, None)], BOB, [ALICE, DAVE]) is None


PEOPLE = st.integers(min_value=1, max_value=6)


@given(st.lists(st.tuples(PEOPLE, st.one_of(st.none(), PEOPLE)).filter(lambda p: p[0] != p[1]), max_size=12))
def test_whatever_the_order_the_accepted_approvals_are_of_distinct_people(approvals: list) -> None:  # type: ignore[type-arg]
    accepted: list[tuple[int | None, int | None]] = []
    for approval in approvals:
        if counts_towards(accepted, approval):
            accepted.append(approval)
    persons = [person for pair in accepted for person in pair if person is not None]
    assert len(persons) == len(set(persons))  # nobody counted twice
    assert approvals_counted(accepted) == len(accepted)  # each accepted approval counts one
    # and at most one approval per person who took part
    assert len(accepted) <= len({p for pair in approvals for p in pair if p is not None})
