"""The receipt keys: rotation by command (old receipts still verify), one key for concurrent
first uses (real threads on PostgreSQL), and the private key nowhere it could leak."""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from approvals.services import step_decide
from envelopes.events import DomainEvent
from envelopes.models import Step
from evidence import keys
from evidence.models import ReceiptKey
from tests.approvals.conftest import approval_envelope, post_envelope
from tests.conftest import AgentClient

from .conftest import SEED_B64, oracle_claims

ROOT = Path(__file__).resolve().parents[2]


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`python manage.py ...` in a fresh process, on this test's database."""
    environ = {**os.environ, **env}
    db = connection.settings_dict
    if db["ENGINE"].endswith("postgresql"):
        environ["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    else:
        pytest.skip("the fresh process needs a database it can share: run with DATABASE_URL on PostgreSQL")
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )


def jwks() -> dict[str, Any]:
    return Client().get("/.well-known/holdpoint/jwks.json").json()


@pytest.mark.django_db(transaction=True)
def test_rotation_adds_a_key_and_old_receipts_still_verify(agent: AgentClient, make_reviewer: Any) -> None:
    rita = make_reviewer("rita", "reviewer")
    first = post_envelope(agent, approval_envelope(operation_ref="run_7/a"))
    old = step_decide(team=first.team, step_id=first.pk, actor=rita, action="approve").decision.receipt

    rotated = manage("rotatereceiptkey")
    assert rotated.returncode == 0, rotated.stderr
    keys.forget_signing_key()  # this process would pick the new key up within KEY_TTL
    second = post_envelope(agent, approval_envelope(operation_ref="run_7/b"))
    new = step_decide(team=second.team, step_id=second.pk, actor=rita, action="approve").decision.receipt

    listed = jwks()
    assert len(listed["keys"]) == 2
    old_header, _ = oracle_claims(old, listed)
    new_header, _ = oracle_claims(new, listed)
    assert old_header["kid"] != new_header["kid"]
    assert new_header["kid"] in rotated.stdout
    seeds = ReceiptKey.objects.values_list("seed", flat=True)
    assert all(seed[:8] not in rotated.stdout + rotated.stderr for seed in seeds)


@pytest.mark.django_db(transaction=True)
def test_rotation_is_refused_while_the_environment_names_the_key() -> None:
    refused = manage("rotatereceiptkey", HOLDPOINT_RECEIPT_KEY=SEED_B64)
    assert refused.returncode != 0
    assert "HOLDPOINT_RECEIPT_KEY" in refused.stderr
    assert SEED_B64 not in refused.stderr + refused.stdout
    assert not ReceiptKey.objects.filter(generation__isnull=False).exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_first_uses_make_one_key() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("a race needs PostgreSQL's row locks and unique checks between connections")
    barrier = threading.Barrier(6)
    kids: list[str] = []
    errors: list[BaseException] = []

    def first_use() -> None:
        try:
            barrier.wait()
            kids.append(keys._load().kid)  # past the process's cache, as separate processes would
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=first_use) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert ReceiptKey.objects.count() == 1
    assert set(kids) == {ReceiptKey.objects.get().kid}


def _seed_forms(seed_b64: str) -> list[str]:
    raw = base64.b64decode(seed_b64)
    return [seed_b64, base64.urlsafe_b64encode(raw).decode().rstrip("="), raw.hex(), seed_b64[:16]]


@pytest.mark.django_db
def test_the_private_key_never_leaves(
    agent: AgentClient, make_reviewer: Any, caplog: pytest.LogCaptureFixture, django_user_model: Any
) -> None:
    caplog.set_level(logging.DEBUG)
    rita = make_reviewer("rita", "reviewer")
    step = post_envelope(agent, approval_envelope(operation_ref="run_7/a"))
    step_decide(team=step.team, step_id=step.pk, actor=rita, action="approve")
    key = ReceiptKey.objects.get()
    forms = _seed_forms(key.seed)

    admin = django_user_model.objects.create_superuser("root", "root@example.com", "x-unused-pw-1")
    browser = Client()
    browser.force_login(admin)
    pages = [
        browser.get("/admin/"),
        browser.get("/admin/evidence/receiptkey/"),
        browser.get(f"/admin/evidence/receiptkey/{key.pk}/change/"),
        Client().get("/.well-known/holdpoint/jwks.json"),
        agent.step("run_7/a"),
    ]
    assert [page.status_code for page in pages] == [200, 200, 200, 200, 200]
    assert key.kid in pages[1].content.decode()  # the admin does list the keys
    # A lookup on the seed through the admin's query string is refused, not answered (it would read
    # the seed out a character at a time).
    for value in (key.seed[:4], "x"):
        assert browser.get("/admin/evidence/receiptkey/", {"seed__startswith": value}).status_code == 400
    events = json.dumps(list(DomainEvent.objects.values_list("data", flat=True)))
    texts = [page.content.decode() for page in pages] + [events, caplog.text, repr(keys.signing_key())]
    for text in texts:
        for form in forms:
            assert form not in text
    assert Step.objects.get(pk=step.pk).decisions.get().receipt  # (and it did sign)
