"""The guard runs an approved input only under a receipt that verifies (contract §13): a proxy
between the SDK and a live Holdpoint alters each claim of the approval's receipt, its
signature, or drops it; each time the call is refused with ReceiptInvalid naming the step, and
the tool is not called. Untouched, the same flow runs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from holdpoint_sdk import AsyncHoldpoint, Failure, Holdpoint, ReceiptInvalid, ToolError
from holdpoint_sdk.receipts import forget_keys
from pytest_django.live_server_helper import LiveServer

from accounts.models import Team
from accounts.services import api_key_create, reviewer_create, team_create
from approvals.services import step_decide
from envelopes.models import Step
from evidence.keys import forget_signing_key
from tests.evidence.conftest import SEED, SEED_B64
from tests.tamper_proxy import (
    Mutation,
    TamperProxy,
    drop_receipt,
    edit_payload,
    flip_signature,
    foreign_key,
    resign,
    tamper_proxy,
)

pytestmark = pytest.mark.django_db(transaction=True)
REFUND = {"order_id": "ord_9", "amount": 900}


def needs_approval() -> None:
    raise ToolError(Failure.approval_required("REFUND_ABOVE_LIMIT", safe_details={"limit": 500}))


@pytest.fixture
def rig(live_server: LiveServer, settings: Any) -> Iterator[tuple[Team, str, TamperProxy, str]]:
    settings.HOLDPOINT_RECEIPT_KEY = SEED_B64  # the live server signs with a key the proxy knows
    forget_signing_key()
    forget_keys()
    team = team_create(slug="receipts")
    with tamper_proxy(live_server.url) as (proxy, url):
        yield team, api_key_create(team=team, name="sdk").raw, proxy, url
    forget_keys()
    forget_signing_key()


def approved(hp: Holdpoint, team: Team, ref: str) -> None:
    held = hp.guarded_call(tool="refund", operation_ref=ref, input=REFUND, call=needs_approval)
    assert held.action == "hold"
    rita = reviewer_create(username=f"rita-{ref[-1]}", password="x-unused-pw-1", team=team, role="reviewer")
    step_decide(team=team, step_id=Step.objects.get(team=team, operation_ref=ref).pk, actor=rita, action="approve")


def test_an_untouched_receipt_lets_the_approved_input_run(rig: tuple[Team, str, TamperProxy, str]) -> None:
    team, key, proxy, url = rig
    with Holdpoint(url, key, timeout=10) as hp:
        approved(hp, team, "rcpt/0")
        calls: list[int] = []
        done = hp.guarded_call(tool="refund", operation_ref="rcpt/0", input=REFUND, call=lambda: calls.append(1))
    assert done.ok and calls == [1]
    assert proxy.paths.count("/.well-known/holdpoint/jwks.json") == 1


TAMPERED: dict[str, Mutation] = {
    "signature": flip_signature,
    "payload edited, signature kept": edit_payload,
    "receipt dropped": drop_receipt,
    "signed by a stranger under the server's kid": foreign_key(None),
    "signed by a stranger's kid": foreign_key("not-a-holdpoint-kid"),
    "iss": resign(SEED, iss="https://evil.example"),
    "operation_ref": resign(SEED, operation_ref="rcpt/other"),
    "tool": resign(SEED, tool="create_invoice"),
    "action": resign(SEED, action="reject"),
    "input_fingerprint": resign(SEED, input_fingerprint="a" * 64),
    "decided_by": resign(SEED, decided_by="mallory"),
    "decided_at": resign(SEED, decided_at="2026-01-01T00:00:00Z"),
    "step_version": resign(SEED, step_version="latest"),
}


@pytest.mark.parametrize("tamper", list(TAMPERED))
def test_a_tampered_receipt_is_refused_and_the_tool_is_not_called(
    rig: tuple[Team, str, TamperProxy, str], tamper: str
) -> None:
    team, key, proxy, url = rig
    with Holdpoint(url, key, timeout=10) as hp:
        approved(hp, team, "rcpt/1")
        proxy.mutate = TAMPERED[tamper]
        calls: list[int] = []
        with pytest.raises(ReceiptInvalid) as refused:
            hp.guarded_call(tool="refund", operation_ref="rcpt/1", input=REFUND, call=lambda: calls.append(1))
    assert proxy.altered == 1
    assert calls == []  # nothing written
    assert refused.value.operation_ref == "rcpt/1"
    assert "'rcpt/1'" in str(refused.value) and "not made" in str(refused.value)
    # Holdpoint saw a granted attempt and no report: the step is verified before any other write.
    assert Step.objects.get(team=team, operation_ref="rcpt/1").last_attempt_reported is False


def test_the_async_guard_refuses_a_tampered_receipt_too(rig: tuple[Team, str, TamperProxy, str]) -> None:
    team, key, proxy, url = rig
    with Holdpoint(url, key, timeout=10) as hp:
        approved(hp, team, "rcpt/2")
    proxy.mutate = resign(SEED, input_fingerprint="b" * 64)
    calls: list[int] = []

    async def main() -> None:
        async with AsyncHoldpoint(url, key, timeout=10) as ahp:
            await ahp.guarded_call(tool="refund", operation_ref="rcpt/2", input=REFUND, call=lambda: calls.append(1))

    with pytest.raises(ReceiptInvalid, match="rcpt/2"):
        anyio.run(main)
    assert calls == []
