"""The tool call's input that an approval binds (contract §3, §4 "Proposed input", §7).

An agent sends the input of its tool call with each attempt; the server recomputes the
fingerprint over its RFC 8785 (JCS) canonical form (the `rfc8785` package, as in the SDK), so
what a reviewer reads is exactly what the approval binds. The input is stored redacted: every
string through the §2 redaction, and the value of a credential-named key replaced whole.

Pages and the decision service use this module: the limits, the canonical form and
fingerprint, the checks (`input_check`, `input_secret_check`), the redaction, the difference
between two inputs (`input_diff`) and the step's current proposal (`proposal_of`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import rfc8785

from .errors import FingerprintMismatch, InputInvalid
from .redaction import redact_json

if TYPE_CHECKING:
    from .models import Step

__all__ = [
    "INPUT_MAX_BYTES",
    "INPUT_MAX_DEPTH",
    "AcceptedInput",
    "Change",
    "Proposal",
    "input_accept",
    "input_canonical",
    "input_check",
    "input_diff",
    "input_fingerprint",
    "input_redact",
    "input_secret_check",
    "previous_proposal",
    "proposal_from_rows",
    "proposal_of",
    "proposals_load",
]

# The canonical form's size limit (contract §4): an input is read by a human, not a blob store.
INPUT_MAX_BYTES = 32 * 1024
# Objects and arrays nested deeper than this are refused: no tool call needs more, and a reviewer
# cannot read it (the tree on the step page, the diff) nor can it be walked cheaply.
INPUT_MAX_DEPTH = 32


def input_canonical(value: Any, *, field: str = "input") -> bytes:
    """The RFC 8785 canonical form of a JSON value, as UTF-8 bytes. A value that has none
    (an integer beyond ±2**53, NaN, a lone surrogate, a non-JSON type) is InputInvalid."""
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, ValueError, TypeError, RecursionError) as error:
        raise InputInvalid(
            f"The {field} has no RFC 8785 canonical form ({error.__class__.__name__}): numbers must be"
            " IEEE 754 doubles (integers within ±2**53) and strings valid Unicode.",
            field=field,
            rule="canonical",
        ) from error


def input_fingerprint(value: Any) -> str:
    """Lowercase hex SHA-256 of the canonical form: the attempt gate's `input_fingerprint`."""
    return hashlib.sha256(input_canonical(value)).hexdigest()


def _depth(value: Any, limit: int) -> int:
    """How deep objects and arrays nest (a flat object is 1); stops counting past `limit`."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


def _checked(value: Any, field: str) -> bytes:
    if not isinstance(value, dict):
        raise InputInvalid(f"The {field} must be a JSON object (the tool call's arguments).", field=field, rule="type")
    if _depth(value, INPUT_MAX_DEPTH) > INPUT_MAX_DEPTH:
        raise InputInvalid(
            f"The {field} nests objects and arrays more than {INPUT_MAX_DEPTH} deep.", field=field, rule="max_depth"
        )
    canonical = input_canonical(value, field=field)
    if len(canonical) > INPUT_MAX_BYTES:
        raise InputInvalid(
            f"The {field} is {len(canonical)} bytes in canonical form; at most {INPUT_MAX_BYTES} are accepted.",
            field=field,
            rule="max_bytes",
        )
    return canonical


def input_check(value: Any, field: str = "input") -> None:
    """Refuse (InputInvalid naming `field`) what is not a JSON object, nests deeper than
    INPUT_MAX_DEPTH, has no canonical form, or is over INPUT_MAX_BYTES once canonical."""
    _checked(value, field)


def input_redact(value: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The input as it may be stored (contract §4): every string at any depth through the §2
    redaction (keys, and JSON held in strings, included), and the value of any credential-named
    key replaced by `[REDACTED:key_name]`. Returns the copy and whether anything was replaced."""
    redacted, kinds = redact_json(value, credential_keys=True)
    return redacted, bool(kinds) or redacted != value


def input_secret_check(value: dict[str, Any], field: str = "input") -> None:
    """Refuse an input that the redaction would change (an approved input never carries a
    secret, and is stored as approved): InputInvalid, rule `no_secret` naming the kinds found,
    or `storable` for characters the database cannot keep (NUL, lone surrogates)."""
    redacted, kinds = redact_json(value, credential_keys=True)
    if kinds:
        raise InputInvalid(
            f"The {field} holds what looks like a secret ({', '.join(kinds)}); an approved input never"
            " carries one. Remove it, or let the agent supply it.",
            field=field,
            rule="no_secret",
        )
    if redacted != value:
        raise InputInvalid(
            f"The {field} holds characters that cannot be stored (NUL or lone surrogates).",
            field=field,
            rule="storable",
        )


@dataclass(frozen=True)
class AcceptedInput:
    fingerprint: str
    stored: dict[str, Any]  # redacted
    redacted: bool


def input_accept(value: Any, *, fingerprint: str, field: str = "input") -> AcceptedInput:
    """The attempt gate's `input`: checked (InputInvalid), its fingerprint recomputed and
    compared with the one sent (FingerprintMismatch), and redacted for storage."""
    canonical = _checked(value, field)
    computed = hashlib.sha256(canonical).hexdigest()
    if computed != fingerprint.lower():
        raise FingerprintMismatch(
            f"input_fingerprint is not the SHA-256 of the input's RFC 8785 canonical form (that is {computed})."
        )
    stored, redacted = input_redact(value)
    return AcceptedInput(fingerprint=computed, stored=stored, redacted=redacted)


# --- what changed between two inputs ---------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One difference between two inputs. `path` is a JSON Pointer (RFC 6901: "/items/0/sku",
    "" for the whole input); `old` is None when added, `new` is None when removed."""

    path: str
    kind: Literal["added", "removed", "changed"]
    old: Any = None
    new: Any = None


def _pointer(parent: str, key: str | int) -> str:
    return f"{parent}/{str(key).replace('~', '~0').replace('/', '~1')}"


def _same(old: Any, new: Any) -> bool:
    # 1 == 1.0 == True in Python; JSON tells a boolean from a number.
    return (type(old) is type(new) and old == new) or (
        isinstance(old, int | float)
        and isinstance(new, int | float)
        and not isinstance(old, bool)
        and not isinstance(new, bool)
        and old == new
    )


def input_diff(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[Change]:
    """What changed from `old` to `new`, leaf by leaf, in document order: keys added, removed or
    changed at any depth; arrays compared index by index (extra items added or removed). A value
    whose type changed (an object that became a string) is one change at its path. None is
    read as an empty input."""
    changes: list[Change] = []
    stack: list[tuple[str, Any, Any]] = [("", old or {}, new or {})]
    while stack:
        path, before, after = stack.pop()
        if isinstance(before, dict) and isinstance(after, dict):
            children: list[tuple[str, Any, Any]] = []
            for key in list(before) + [key for key in after if key not in before]:
                child = _pointer(path, key)
                if key not in after:
                    changes.append(Change(child, "removed", old=before[key]))
                elif key not in before:
                    changes.append(Change(child, "added", new=after[key]))
                else:
                    children.append((child, before[key], after[key]))
            stack.extend(reversed(children))
        elif isinstance(before, list) and isinstance(after, list):
            children = []
            for index in range(max(len(before), len(after))):
                child = _pointer(path, index)
                if index >= len(after):
                    changes.append(Change(child, "removed", old=before[index]))
                elif index >= len(before):
                    changes.append(Change(child, "added", new=after[index]))
                else:
                    children.append((child, before[index], after[index]))
            stack.extend(reversed(children))
        elif not _same(before, after):
            changes.append(Change(path, "changed", old=before, new=after))
    return sorted(changes, key=lambda change: _order(change.path))


def _order(path: str) -> list[tuple[int, int | str]]:
    # Document order: a parent before its children, array items by number.
    return [(0, int(part)) if part.isdigit() else (1, part) for part in path.split("/")[1:]]


# --- the step's proposal ------------------------------------------------------------------------


@dataclass(frozen=True)
class Proposal:
    """The input under review (contract §4, the step's `proposal`), as stored (redacted).

    `attempt` is the granted attempt's number, or None when the input came with a request the
    gate refused (`approval_mismatch`): the step then waits for an approval of that input."""

    attempt: int | None
    input_fingerprint: str
    input: dict[str, Any] | None  # None: the agent sent no input
    input_redacted: bool
    proposed_at: datetime

    def as_dict(self) -> dict[str, Any]:
        from .rfc3339 import rfc3339

        return {
            "attempt": self.attempt,
            "input_fingerprint": self.input_fingerprint,
            "input": self.input,
            "input_redacted": self.input_redacted,
            "proposed_at": rfc3339(self.proposed_at),
        }

    @property
    def editable(self) -> bool:
        """A reviewer may edit it ("Edit and approve"): it was sent, and not redacted."""
        return self.input is not None and not self.input_redacted


_UNSET = object()


def _from_attempt(attempt: Any) -> Proposal:
    return Proposal(
        attempt=attempt.number,
        input_fingerprint=attempt.fingerprint,
        input=attempt.input,
        input_redacted=attempt.input_redacted,
        proposed_at=attempt.granted_at,
    )


def _from_refused(row: Any) -> Proposal:
    return Proposal(
        attempt=None,
        input_fingerprint=row.fingerprint,
        input=row.input,
        input_redacted=row.input_redacted,
        proposed_at=row.proposed_at,
    )


def _edited_under_review(step: Step) -> Proposal:
    """An edited approval the agent has not run yet and that is under review again (the agent
    asked for approval before running it): the binding is that input, so it is the proposal."""
    decision = (
        step.decisions.filter(
            action="approve", edited=True, input_fingerprint=step.approval_fingerprint
        )
        .order_by("-id")
        .first()
    )
    if decision is None:
        # The binding names an input no row holds (a refusal recorded before inputs were kept):
        # say so, rather than show the latest attempt's input, which the approval would not bind.
        return Proposal(
            attempt=None,
            input_fingerprint=step.approval_fingerprint,
            input=None,
            input_redacted=False,
            proposed_at=step.state_entered_at,
        )
    return Proposal(
        attempt=None,
        input_fingerprint=decision.input_fingerprint,
        input=decision.edited_input,
        input_redacted=False,
        proposed_at=decision.decided_at,
    )


def proposal_remember(step: Step, proposal: Proposal | None) -> None:
    """Set what `proposal_of(step)` answers for this instance (the gate knows it: no query)."""
    step._proposal = proposal  # type: ignore[attr-defined]


def proposal_of(step: Step) -> Proposal | None:
    """The step's proposal: the input the next approval binds, as stored. That is the input of
    the latest granted attempt, unless the step's binding (`approval_fingerprint`) names another
    input: one that a refused request (`approval_mismatch`) sent, or an edited approval not run
    yet. None when no attempt was ever granted. A few indexed reads, remembered on the instance."""
    known = getattr(step, "_proposal", _UNSET)
    if known is not _UNSET:
        return known  # type: ignore[return-value]
    from .models import Attempt, ProposedInput

    attempt = refused = None
    # last_fingerprint is set by every grant; a step never granted has a proposal only when a
    # rule held its first call (§11: the binding names the refused input).
    if step.last_fingerprint or step.approval_fingerprint:
        if bound_elsewhere(step):
            refused = (
                ProposedInput.objects.filter(step_id=step.pk, fingerprint=step.approval_fingerprint)
                .order_by("-id")
                .first()
            )
        else:
            attempt = Attempt.objects.filter(step_id=step.pk).order_by("-number").first()
    proposal = proposal_from_rows(step, attempt=attempt, refused=refused)
    proposal_remember(step, proposal)
    return proposal


def bound_elsewhere(step: Step) -> bool:
    """The binding names an input other than the latest granted attempt's, whatever its
    standing (under review or approved, lifecycle.Snapshot): the proposal is the bound input."""
    return bool(step.approval_fingerprint) and step.approval_fingerprint != step.last_fingerprint


def proposal_from_rows(step: Step, *, attempt: Any | None, refused: Any | None) -> Proposal | None:
    """The rule of `proposal_of`, given the rows it reads (a caller that read them itself, as the
    hot path does): `attempt`, the step's latest Attempt (needed unless `bound_elsewhere`),
    and `refused`, its latest ProposedInput with the binding's fingerprint (needed if so)."""
    if not step.last_fingerprint and not step.approval_fingerprint:
        return None
    if bound_elsewhere(step):
        return _from_refused(refused) if refused is not None else _edited_under_review(step)
    return _from_attempt(attempt) if attempt is not None else None


def proposals_load(steps: Iterable[Step]) -> None:
    """Remember the proposal of every step of a list (`proposal_of` then reads no row): two
    queries for the page, whatever its size."""
    from django.db.models import OuterRef, Subquery

    from .models import Attempt, ProposedInput

    steps = list(steps)
    tried = [step for step in steps if step.last_fingerprint]
    for step in steps:
        if not step.last_fingerprint:
            proposal_remember(step, None)
    if not tried:
        return
    under_review = {step.pk: step.approval_fingerprint for step in tried if bound_elsewhere(step)}
    refused: dict[int, Any] = {}
    if under_review:
        for row in ProposedInput.objects.filter(step_id__in=under_review).order_by("id"):
            if row.fingerprint == under_review[row.step_id]:
                refused[row.step_id] = row  # the latest wins
    latest = Attempt.objects.filter(step_id=OuterRef("step_id")).order_by("-number").values("number")[:1]
    attempts = {
        attempt.step_id: attempt
        for attempt in Attempt.objects.filter(step_id__in=[step.pk for step in tried], number=Subquery(latest))
    }
    for step in tried:
        if step.pk in refused:
            proposal_remember(step, _from_refused(refused[step.pk]))
        elif step.pk in under_review:
            continue  # rare (an edited approval under review again): proposal_of reads it
        else:
            attempt = attempts.get(step.pk)
            proposal_remember(step, _from_attempt(attempt) if attempt is not None else None)


def previous_proposal(step: Step, proposal: Proposal) -> Proposal | None:
    """The input before `proposal` (for "what the agent changed"): the granted attempt before it,
    or, for a refused request's input, the latest granted attempt. None when there is none."""
    from .models import Attempt

    attempts = Attempt.objects.filter(step_id=step.pk)
    if proposal.attempt is not None:
        attempts = attempts.filter(number__lt=proposal.attempt)
    attempt = attempts.order_by("-number").first()
    return _from_attempt(attempt) if attempt is not None else None
