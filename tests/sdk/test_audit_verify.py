"""`holdpoint audit verify` (contract §13): an export made by `manage.py exportaudit` checks out
offline, in a fresh process with no server and no database, and each kind of tampering is
named: a deleted line, an edited field, a reordered pair, a forged seal, and a receipt for
another input (a forger who rewrote the chain's hashes, but cannot sign)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from accounts.models import Team
from approvals.services import step_decide
from envelopes.audit import audit_seal
from evidence.keys import forget_signing_key
from tests.approvals.conftest import approval_envelope, post_envelope
from tests.conftest import AgentClient
from tests.reviewers.conftest import token_for

ROOT = Path(__file__).resolve().parents[2]
GENESIS = "0" * 64

pytestmark = pytest.mark.django_db(transaction=True)


def _env() -> dict[str, str]:
    db = connection.settings_dict
    if not db["ENGINE"].endswith("postgresql"):
        pytest.skip("exportaudit runs in a fresh process: run with DATABASE_URL on PostgreSQL")
    return {**os.environ, "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"}


def verify(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The SDK's command, with no database and no server anywhere in its environment."""
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "HOLDPOINT_URL")}
    return subprocess.run(
        [sys.executable, "-c", "import sys; from holdpoint_sdk.reviewer_cli import main; sys.exit(main())",
         "audit", "verify", str(path), *args],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.fixture
def exported(agent: AgentClient, make_reviewer: Any, tmp_path: Path) -> tuple[list[dict[str, Any]], Path]:
    forget_signing_key()
    rita = make_reviewer("rita", "reviewer")
    for n in range(3):
        step = post_envelope(agent, approval_envelope(operation_ref=f"run_7/charge_{n}"))
        step_decide(team=step.team, step_id=step.pk, actor=rita, action="approve")
        if n == 1:
            audit_seal(team=step.team)
    step = post_envelope(agent, approval_envelope(operation_ref="run_7/charge_9"))
    step_decide(team=step.team, step_id=step.pk, actor=rita, action="reject", reason="too much")
    audit_seal(team=Team.objects.get(slug="acme"))
    done = subprocess.run(
        [sys.executable, "manage.py", "exportaudit", "acme"], cwd=ROOT, env=_env(), capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    # The reviewer API streams the same bytes as the command.
    api = token_for(make_reviewer("ada", "admin"))
    assert b"".join(api.http.get("/api/v1/teams/acme/audit").streaming_content) == done.stdout
    jwks = tmp_path / "jwks.json"
    jwks.write_text(Client().get("/.well-known/holdpoint/jwks.json").content.decode())
    entries = [json.loads(line) for line in done.stdout.splitlines()]
    return entries, jwks


def write(tmp_path: Path, entries: list[dict[str, Any]]) -> Path:
    path = tmp_path / "export.jsonl"
    path.write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    return path


def rehash(entries: list[dict[str, Any]]) -> None:
    """What a forger with the database but not the signing key can do: recompute every link's
    and seal's hash (and the heads the seals record) so that the hashes agree again."""
    from holdpoint_sdk.audit_verify import link_hash

    heads: dict[tuple[str, int], str] = {}
    last: dict[str, str] = {}
    seal_prev = GENESIS
    for entry in entries:
        if entry["type"] == "link":
            fields = entry["fields"]
            entry["prev_hash"] = last.get(fields["chain"], GENESIS)
            entry["hash"] = link_hash(entry["prev_hash"], fields)
            last[fields["chain"]] = entry["hash"]
            heads[(fields["chain"], fields["seq"])] = entry["hash"]
        elif entry["type"] == "seal":
            fields = entry["fields"]
            fields["heads"] = {chain: [seq, heads[(chain, seq)]] for chain, (seq, _) in fields["heads"].items()}
            entry["prev_hash"] = seal_prev
            entry["hash"] = link_hash(seal_prev, fields)
            seal_prev = entry["hash"]


def links(entries: list[dict[str, Any]], kind: str | None = None) -> list[int]:
    return [
        index
        for index, entry in enumerate(entries)
        if entry["type"] == "link" and (kind is None or entry["fields"]["kind"] == kind)
    ]


def test_an_untouched_export_verifies_offline(exported: Any, tmp_path: Path) -> None:
    entries, jwks = exported
    done = verify(write(tmp_path, entries), "--jwks", str(jwks))
    assert done.returncode == 0, done.stderr
    assert "intact" in done.stdout and "4 receipts" in done.stdout and "signatures checked" in done.stdout
    unsigned = verify(write(tmp_path, entries))
    assert unsigned.returncode == 0 and "NOT checked" in unsigned.stdout


def test_a_deleted_line_is_named(exported: Any, tmp_path: Path) -> None:
    entries, jwks = exported
    index = links(entries, "decision")[0]
    chain = entries[index]["fields"]["chain"]
    del entries[index]
    done = verify(write(tmp_path, entries), "--jwks", str(jwks))
    assert done.returncode == 1
    assert f"{chain}#" in done.stderr and "missing" in done.stderr


def test_a_deleted_last_link_is_caught_by_its_seal(exported: Any, tmp_path: Path) -> None:
    entries, jwks = exported
    index = links(entries)[-1]
    chain = entries[index]["fields"]["chain"]
    del entries[index]
    done = verify(write(tmp_path, entries), "--jwks", str(jwks))
    assert done.returncode == 1
    assert "seal" in done.stderr and chain in done.stderr


def test_an_edited_field_is_named(exported: Any, tmp_path: Path) -> None:
    entries, jwks = exported
    index = links(entries, "decision")[1]
    entries[index]["fields"]["actor"] = "mallory"
    done = verify(write(tmp_path, entries), "--jwks", str(jwks))
    assert done.returncode == 1
    assert f"line {index + 1}:" in done.stderr and "altered" in done.stderr


def test_a_reordered_pair_is_named(exported: Any, tmp_path: Path) -> None:
    entries, jwks = exported
    first, second = links(entries)[2:4]
    entries[first], entries[second] = entries[second], entries[first]
    done = verify(write(tmp_path, entries), "--jwks", str(jwks))
    assert done.returncode == 1
    assert f"line {first + 1}:" in done.stderr or f"line {second + 1}:" in done.stderr
    assert "out of order" in done.stderr or "missing" in done.stderr


def test_a_forged_seal_is_named(exported: Any, tmp_path: Path) -> None:
    entries, jwks = exported
    from holdpoint_sdk.audit_verify import link_hash

    seal = next(entry for entry in entries if entry["type"] == "seal")
    chain = next(iter(seal["fields"]["heads"]))
    seal["fields"]["heads"][chain][1] = "f" * 64  # a head no link has, the seal's own hash made to fit
    seal["hash"] = link_hash(seal["prev_hash"], seal["fields"])
    done = verify(write(tmp_path, entries), "--jwks", str(jwks))
    assert done.returncode == 1
    assert "seal 1" in done.stderr


def test_a_receipt_for_another_input_is_named_even_after_a_rewrite(exported: Any, tmp_path: Path) -> None:
    entries, jwks = exported
    index = links(entries, "decision")[0]
    entries[index]["fields"]["data"]["input_fingerprint"] = "e" * 64  # "another input was approved"
    rehash(entries)
    done = verify(write(tmp_path, entries), "--jwks", str(jwks))
    assert done.returncode == 1
    assert f"line {index + 1}:" in done.stderr and "receipt is for another input fingerprint" in done.stderr


def test_a_swapped_or_forged_receipt_is_named(exported: Any, tmp_path: Path) -> None:
    entries, jwks = exported
    first, second = links(entries, "decision")[:2]
    data = entries[first]["fields"]["data"]
    head, payload, signature = data["receipt"].split(".")
    data["receipt"] = f"{head}.{payload}.{signature[:-4]}AAAA"
    rehash(entries)
    done = verify(write(tmp_path, entries), "--jwks", str(jwks))
    assert done.returncode == 1 and "signature does not verify" in done.stderr

    entries[first]["fields"]["data"]["receipt"] = entries[second]["fields"]["data"]["receipt"]
    rehash(entries)
    done = verify(write(tmp_path, entries), "--jwks", str(jwks))
    assert done.returncode == 1 and "receipt is for another" in done.stderr
