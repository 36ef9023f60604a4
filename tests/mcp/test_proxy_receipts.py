"""holdpoint-mcp runs an approved input only under a receipt that verifies (contract §13): with
a tampering proxy between it and a live Holdpoint, the approved refund whose receipt was
altered is refused with a clear error naming its step, and the upstream is not called; the
other approved refund, untouched, runs."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
import pytest

from accounts.services import reviewer_create
from approvals.services import step_decide
from envelopes.models import Step
from evidence.keys import forget_signing_key
from tests.evidence.conftest import SEED, SEED_B64
from tests.mcp.conftest import Rig
from tests.tamper_proxy import flip_signature, resign, tamper_proxy

pytestmark = [pytest.mark.django_db(transaction=True)]


def text(result: types.CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, types.TextContent))


@pytest.mark.parametrize("tamper", ["signature", "input_fingerprint"])
def test_a_tampered_receipt_is_refused_and_the_upstream_is_not_called(rig: Rig, settings: Any, tamper: str) -> None:
    settings.HOLDPOINT_RECEIPT_KEY = SEED_B64
    forget_signing_key()
    rig.config_file.write_text("[tools.issue_refund]\nhold_wait_s = 0\n")
    reviewer = reviewer_create(username="rita", password="x-unused-pw-1", team=rig.team, role="reviewer")
    orders = [{"order_id": "ord_1", "amount": 900}, {"order_id": "ord_2", "amount": 800}]

    with tamper_proxy(rig.url) as (proxy, url):

        async def ask() -> list[types.CallToolResult]:
            async with rig.session(HOLDPOINT_URL=url) as session:
                return [await session.call_tool("issue_refund", order) for order in orders]

        held = anyio.run(ask)
        assert all(result.is_error for result in held)
        refs = [result.structured_content["holdpoint"]["operation_ref"] for result in held]  # type: ignore[index]
        for ref in refs:
            step = Step.objects.get(team=rig.team, operation_ref=ref)
            step_decide(team=rig.team, step_id=step.pk, actor=reviewer, action="approve")
        proxy.only_ref = refs[0]
        proxy.mutate = flip_signature if tamper == "signature" else resign(SEED, input_fingerprint="c" * 64)
        refused, ran = anyio.run(ask)

    assert proxy.altered == 1
    assert refused.is_error
    assert "receipt_invalid" in text(refused) and refs[0] in text(refused) and "not made" in text(refused)
    assert not ran.is_error, text(ran)
    calls = rig.upstream_calls("issue_refund")
    # Each order asked once (held); after the approvals only the untouched one ran.
    assert [call["arguments"]["order_id"] for call in calls] == ["ord_1", "ord_2", "ord_2"]
    assert Step.objects.get(team=rig.team, operation_ref=refs[1]).state == "succeeded"
