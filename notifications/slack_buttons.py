"""What Slack's `Approve` button carries, and how Holdpoint knows it made it (contract §10).

Slack signs the request a press makes, but not the message the button sat in: any message posted
through the same Slack app can carry a `holdpoint.approve` button with any value. So the value
carries a MAC that only Holdpoint can make: HMAC-SHA256 (Django's `salted_hmac`, keyed from
SECRET_KEY with this module's purpose string) over the team, the operation_ref, the step's ETag
when the message was built (`"<step id>.<version>"`, so the step id too) and the full fingerprint
of the input the message shows whole. The value shows the fingerprint's first 12 hex digits,
which the message text shows too; the full fingerprint is never in the value, so a press is
checked against the step as it is now: a MAC that does not verify with the step's current ETag
and fingerprint is a message out of date, or one Holdpoint did not make, and decides nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from django.conf import settings
from django.utils.crypto import constant_time_compare, salted_hmac

MAC_PURPOSE = "holdpoint.notifications.slack-approve.v1"
FINGERPRINT_SHOWN = 12
FINGERPRINT_SHOWN_RE = re.compile(r"\A[0-9a-f]{12}\Z")
MAC_RE = re.compile(r"\A[0-9a-f]{64}\Z")


def fingerprint_shown(fingerprint: str) -> str:
    """The part of a fingerprint a message shows (and the button repeats)."""
    return fingerprint[:FINGERPRINT_SHOWN]


def _mac(*, team: str, operation_ref: str, etag: str, fingerprint: str, secret: str) -> str:
    # A JSON array: no choice of separator lets one field's text pass for another's.
    message = json.dumps([team, operation_ref, etag, fingerprint], separators=(",", ":"), ensure_ascii=True)
    return salted_hmac(MAC_PURPOSE, message, secret=secret, algorithm="sha256").hexdigest()


def approve_mac(*, team: str, operation_ref: str, etag: str, fingerprint: str) -> str:
    return _mac(team=team, operation_ref=operation_ref, etag=etag, fingerprint=fingerprint, secret=settings.SECRET_KEY)


def approve_value(*, team: str, operation_ref: str, etag: str, fingerprint: str) -> str:
    """The Approve button's value for a message that shows the whole input `fingerprint` names."""
    return json.dumps(
        {
            "team": team,
            "operation_ref": operation_ref,
            "etag": etag,
            "fp": fingerprint_shown(fingerprint),
            "mac": approve_mac(team=team, operation_ref=operation_ref, etag=etag, fingerprint=fingerprint),
        },
        separators=(",", ":"),
    )


@dataclass(frozen=True)
class ApproveValue:
    """What a pressed Approve's value says (nothing in it is trusted until `made_for` says so)."""

    team: str
    operation_ref: str
    etag: str
    fingerprint_shown: str  # "" when absent or malformed
    mac: str  # "" when absent or malformed

    def made_for(self, *, team: str, operation_ref: str, etag: str, fingerprint: str) -> bool:
        """Whether Holdpoint made this value for the step as it is now: the same team, ref, ETag
        and fingerprint. Compared in constant time; SECRET_KEY_FALLBACKS still verify, so a key
        rotation does not strand the buttons already posted."""
        if not self.mac or not fingerprint:
            return False
        if (self.team, self.operation_ref, self.etag) != (team, operation_ref, etag):
            return False
        if not constant_time_compare(self.fingerprint_shown, fingerprint_shown(fingerprint)):
            return False
        secrets = [settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS]
        return any(
            constant_time_compare(
                self.mac, _mac(team=team, operation_ref=operation_ref, etag=etag, fingerprint=fingerprint, secret=s)
            )
            for s in secrets
        )

    @property
    def step_id(self) -> int | None:
        """The step the value's ETag names, or None."""
        match = re.match(r'\A"(\d+)\.\d+"\Z', self.etag)
        return int(match.group(1)) if match else None


def value_fields(fp: object, mac: object) -> tuple[str, str]:
    """The value's `fp` and `mac` when well formed, else "" (an older message's button had
    neither; such a value is out of date, not malformed)."""
    shown = fp if isinstance(fp, str) and FINGERPRINT_SHOWN_RE.match(fp) else ""
    tag = mac if isinstance(mac, str) and MAC_RE.match(mac) else ""
    return shown, tag
