"""Issue 29 point 3: holdpoint-mcp returns a success at once and posts its envelope in the
background (report_success="after", its default). A proxy killed with SIGKILL while reports
are queued loses them: those steps keep a granted attempt with no report, the next gate call
answers `verification_required` (contract §4), a verification report resolves them, and no
write happens twice. The proxy, the upstream and Holdpoint are real processes and a live
server (conftest.py); between the proxy and Holdpoint, tests/tamper_proxy.py swallows the
envelopes so that they stay queued until the kill."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from holdpoint_sdk import Holdpoint

from envelopes.models import Envelope, Step
from tests.mcp.conftest import Rig
from tests.mcp.test_proxy_e2e import holdpoint, run, text
from tests.tamper_proxy import tamper_proxy
from tests.worker import wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]

INVOICES = [{"customer": "cus_k1", "amount": 10}, {"customer": "cus_k2", "amount": 20}]


def _proxy_pids() -> list[int]:
    """The holdpoint-mcp processes this test process started (the stdio client's children)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and b"holdpoint_sdk.mcp_proxy" in cmdline:
            pids.append(int(entry.name))
    return pids


def test_a_success_returns_before_its_report_and_the_proxy_logs_the_queue(rig: Rig, tmp_path: Path) -> None:
    """The envelope is swallowed (never answered until released): the client has its result
    anyway, and the proxy's log counts the queue; on a clean exit it flushes what it holds."""
    with tamper_proxy(rig.url) as (tamper, url):
        tamper.swallow = ("POST", "/api/v1/envelopes")
        behind = dataclasses.replace(rig, url=url)
        log = tmp_path / "proxy.log"

        async def main() -> Any:
            with log.open("w") as errlog:
                async with behind.session(errlog=errlog, HOLDPOINT_MCP_LOG="info") as session:
                    began = time.monotonic()
                    result = await session.call_tool("create_invoice", INVOICES[0])
                    spent = time.monotonic() - began
                    tamper.released.set()  # the report is answered 503: retried, then delivered
                    tamper.swallow = None
                    return result, spent

        result, spent = anyio.run(main)
    assert not result.is_error and holdpoint(result)["directive"]["action"] == "stop"
    assert "is done (committed)" in text(result)
    assert spent < 5  # the swallowed report (held up to 120 s) did not hold the answer
    assert "(1 report(s) in the queue)" in log.read_text()
    # Flushed at exit: delivered under its key after the 503, once.
    ref = holdpoint(result)["operation_ref"]
    assert Step.objects.get(team=rig.team, operation_ref=ref).state == "succeeded"
    assert Envelope.objects.filter(step__operation_ref=ref).count() == 1


def test_a_proxy_killed_with_reports_queued_leaves_steps_to_verify_and_no_write_twice(rig: Rig) -> None:
    rig.config_file.write_text("call_timeout_s = 1.5\n")  # no verification tool: the client is told
    with tamper_proxy(rig.url) as (tamper, url):
        tamper.swallow = ("POST", "/api/v1/envelopes")
        behind = dataclasses.replace(rig, url=url)

        async def main() -> list[Any]:
            results, killed = [], False
            try:
                async with behind.session() as session:
                    for invoice in INVOICES:
                        results.append(await session.call_tool("create_invoice", invoice))
                    # One report is being posted (held by the tamper proxy), the other waits behind it.
                    assert wait_until(lambda: len(tamper.swallowed) == 1, timeout=10)
                    (pid,) = _proxy_pids()
                    os.kill(pid, signal.SIGKILL)  # with both reports queued
                    killed = True
                    assert wait_until(lambda: not _proxy_pids() or _reaped(pid), timeout=10)
            except Exception:
                if not killed:
                    raise
                # else: the session's end finds its server gone, which is the point
            return results

        first = anyio.run(main)
        tamper.released.set()  # the swallowed reports are answered 503 to a dead process
    assert [r.is_error for r in first] == [False, False]
    refs = [holdpoint(r)["operation_ref"] for r in first]
    assert all(holdpoint(r)["directive"]["action"] == "stop" for r in first)
    # The reports were lost with the proxy: each step has a granted attempt and no report.
    steps = {s.operation_ref: s for s in Step.objects.filter(team=rig.team, operation_ref__in=refs)}
    assert {ref: (s.state, s.attempts) for ref, s in steps.items()} == {ref: ("in_progress", 1) for ref in refs}
    assert not Envelope.objects.filter(step__operation_ref__in=refs).exists()

    async def again(session: Any) -> list[Any]:
        return [await session.call_tool("create_invoice", invoice) for invoice in INVOICES]

    retried = run(rig, again)  # a new proxy, straight to Holdpoint
    assert [holdpoint(r).get("refused") for r in retried] == ["verification_required"] * 2
    assert all(r.is_error and "The tool was not called." in text(r) for r in retried)
    assert len(rig.upstream_calls("create_invoice")) == 2  # one write per step, never a second

    with Holdpoint(rig.url, api_key=rig.api_key) as hp:
        for ref in refs:
            answer = hp.report_verification(ref, outcome="committed", evidence_ref="inv-by-ref")
            assert answer["step"]["state"] == "succeeded"

    after = run(rig, again)
    assert [holdpoint(r).get("refused") for r in after] == ["already_committed"] * 2
    assert len(rig.upstream_calls("create_invoice")) == 2


def _reaped(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"  # a zombie: dead, not yet waited for
