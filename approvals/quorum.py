"""Who counts towards a quorum (contract §12): each approval counts the persons it stands for,
its reviewer and, when a delegate made it, the away member it was made for. A person counts once:
an approval naming someone already among the counted approvals' persons is refused, so a
delegate never counts twice (as themselves and for someone, or for two people), nor does an
away member whose delegate already approved for them. Pure functions: no query."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# An approval's persons: (reviewer id, on_behalf_of id); a rule's or grant's has no reviewer.
Persons = tuple[int | None, int | None]


def persons_of(counted: Iterable[Persons]) -> set[int]:
    return {person for pair in counted for person in pair if person is not None}


def counts_towards(counted: Iterable[Persons], approval: Persons) -> bool:
    """May `approval` count beside the `counted` approvals of the same input? None of its
    persons is among theirs."""
    taken = persons_of(counted)
    return not any(person is not None and person in taken for person in approval)


def approvals_counted(counted: Iterable[Persons]) -> int:
    """How many approvals the counted ones make: one per reviewer (a rule's, reviewer None, once)."""
    return len({reviewer for reviewer, _ in counted})


def first_counting(counted: Sequence[Persons], reviewer_id: int, stand_ins: Sequence[int | None]) -> Persons | None:
    """The first of the reviewer's possible approvals (as themselves: None; for each away member
    in turn) that counts towards the quorum, or None when none does."""
    for on_behalf_of in stand_ins:
        if counts_towards(counted, (reviewer_id, on_behalf_of)):
            return (reviewer_id, on_behalf_of)
    return None
