"""Issue 29 point 3, the Python guard: with report_success="after" a success is returned at
once and its envelope posted in the background (bounded queue, retried with the same
Idempotency-Key, flushed on close); a failure is still reported before the call returns.
Against a real Holdpoint (pytest-django's live_server), through the SDK as an agent uses it."""

from __future__ import annotations

import asyncio
import threading

import pytest
from holdpoint_sdk import AsyncHoldpoint, Failure, Holdpoint, ToolError
from pytest_django.live_server_helper import LiveServer

from accounts.services import api_key_create, team_create
from envelopes.models import Envelope, IdempotencyRecord, Step
from tests.tamper_proxy import tamper_proxy
from tests.worker import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
INVOICE = {"customer": "cus_1", "amount": 1250}


def _key(slug: str) -> str:
    return api_key_create(team=team_create(slug=slug), name="sdk").raw


def test_a_success_returns_before_its_report_and_lands_once(live_server: LiveServer) -> None:
    with Holdpoint(live_server.url, _key("after"), timeout=5, report_success="after") as hp:
        done = hp.guarded_call(tool="create_invoice", operation_ref="a/1", input=INVOICE, call=lambda: {"id": "inv_1"})
        assert done.ok and done.report_pending and done.answer is None
        assert (done.action, done.directive["reason"]) == ("stop", "committed")
        # The next gate call on this step waits for its report, so it is refused as committed.
        again = hp.guarded_call(tool="create_invoice", operation_ref="a/1", input=INVOICE, call=lambda: 1 / 0)
        assert again.refused and again.refusal is not None and again.refusal.code == "already_committed"

        # A failure is reported before it returns: its directive is Holdpoint's.
        def invalid() -> None:
            raise ToolError(Failure.invalid_input("INVALID_AMOUNT", field="amount"))

        failed = hp.guarded_call(tool="create_invoice", operation_ref="a/2", input=INVOICE, call=invalid)
        assert not failed.report_pending and failed.answer is not None
        assert (failed.step["state"], failed.action) == ("needs_input", "fix_input")
        assert hp.flush_reports(10) and hp.reports_queued == 0
    assert Step.objects.get(operation_ref="a/1").state == "succeeded"
    assert Envelope.objects.filter(step__operation_ref="a/1").count() == 1


def test_an_undelivered_report_is_retried_with_the_same_key(live_server: LiveServer) -> None:
    with tamper_proxy(live_server.url) as (tamper, url):
        tamper.swallow = ("POST", "/api/v1/envelopes")
        tamper.released.set()  # every swallowed post is answered 503 at once
        hp = Holdpoint(url, _key("retry"), timeout=5, max_retries=0, report_success="after")
        guard = hp.guard(tool="create_invoice", operation_ref="r/1", input=INVOICE)
        outcome = guard.call(lambda: {"id": "inv_1"})
        assert outcome.report_pending
        assert wait_until(lambda: len(tamper.swallowed) == 1, timeout=10)
        tamper.swallow = None  # the retry (after 0.5 s) goes through
        hp.close()  # flushes
    assert Step.objects.get(operation_ref="r/1").state == "succeeded"
    record = IdempotencyRecord.objects.get(key=guard.envelope_idempotency_key)
    assert record.status == 201
    assert Envelope.objects.filter(step__operation_ref="r/1").count() == 1


def test_a_full_queue_reports_at_once_instead_of_dropping(live_server: LiveServer) -> None:
    with Holdpoint(live_server.url, _key("full"), timeout=5, report_success="after", report_queue_size=1) as hp:
        refs = [f"f/{n}" for n in range(4)]
        threads = [
            threading.Thread(
                target=hp.guarded_call,
                kwargs={"tool": "create_invoice", "operation_ref": ref, "input": {"n": n}, "call": lambda: {}},
            )
            for n, ref in enumerate(refs)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert {s.operation_ref: s.state for s in Step.objects.filter(operation_ref__in=refs)} == dict.fromkeys(
        refs, "succeeded"
    )


def test_the_async_guard_reports_after_and_aclose_flushes(live_server: LiveServer) -> None:
    key = _key("async")

    async def main() -> None:
        hp = AsyncHoldpoint(live_server.url, key, timeout=5, report_success="after")
        try:
            done = await hp.guarded_call(tool="create_invoice", operation_ref="s/1", input=INVOICE, call=lambda: {})
            assert done.ok and done.report_pending and done.action == "stop"
        finally:
            await hp.aclose()
        assert hp.reports_queued == 0

    asyncio.run(main())
    assert Step.objects.get(operation_ref="s/1").state == "succeeded"


def test_report_success_is_before_or_after(live_server: LiveServer) -> None:
    with pytest.raises(ValueError, match="report_success"):
        Holdpoint(live_server.url, "hp_x", report_success="later")  # type: ignore[arg-type]
