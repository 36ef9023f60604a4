"""A verification report's evidence_ref is agent text stored in the audit chain: it is redacted
as decoded values (issue 10 leftover), so a secret behind JSON escapes or under a
credential-named key never reaches the database."""

from __future__ import annotations

import json

import pytest

from envelopes.models import AuditEvent
from tests.conftest import fingerprint, unknown_outcome

pytestmark = pytest.mark.django_db

REF = "run_81/step_4"


@pytest.mark.parametrize(
    ("evidence", "secret"),
    [
        ('{"dsn": "postgres:\\/\\/admin:pw-0xdead@db:5432\\/app"}', "pw-0xdead"),
        ('{"row": 42, "token": "tok-9f8e7d6c5b4a"}', "tok-9f8e7d6c5b4a"),
        ("lookup via Bearer abcdefghijklmnopqrstuvwxyz0123", "abcdefghijklmnopqrstuvwxyz0123"),
    ],
)
def test_a_secret_in_evidence_ref_is_redacted_before_storage(agent, evidence: str, secret: str) -> None:
    agent.attempt(REF, tool="send_email", fingerprint=fingerprint("a"))
    agent.envelope(unknown_outcome())
    assert agent.verify(REF, "committed", evidence_ref=evidence).status_code == 200
    stored = json.dumps(list(AuditEvent.objects.values("data")))
    assert secret not in stored
    assert "[REDACTED:" in stored


def test_plain_evidence_is_kept_as_sent(agent) -> None:
    agent.attempt(REF, tool="send_email", fingerprint=fingerprint("a"))
    agent.envelope(unknown_outcome())
    agent.verify(REF, "committed", evidence_ref='{"invoice": "in_123", "status": "paid"}')
    link = AuditEvent.objects.filter(kind="transition").latest("id")
    assert link.data["evidence_ref"] == '{"invoice": "in_123", "status": "paid"}'
