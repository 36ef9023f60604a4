"""What `holdpoint-mcp` adds to a tool call: p50/p95/p99 of the same tools/call made directly to an
MCP server and through the proxy, against a running Holdpoint, and where the difference goes.

    .venv/bin/python bench/mcp_proxy_latency.py --base-url http://127.0.0.1:8000 --api-key hp_... [-n 300]
    .venv/bin/python bench/mcp_proxy_latency.py --stub-only [-n 300]     # no Holdpoint needed

Every call has a fresh input, so every guarded call is a new step that commits (attempt gate,
upstream call, envelope). The series, interleaved call by call so that the machine's load
swings hit them alike:
- direct:      an MCP ClientSession -> tests/mcp/upstream_server.py (stdio), each call with the
               `_meta` the proxy would add (so the upstream does the same work for both);
- proxied:     an MCP ClientSession -> holdpoint-mcp -> the same upstream, Holdpoint at --base-url;
- holdpoint:   the proxy's two requests alone (attempt gate, then envelope, with Idempotency-Keys,
               from the proxy's own HTTP client in this process);
- stub:        the same two requests to a stub Holdpoint (this file, --serve-stub: h11 on asyncio,
               kept-alive, canned answers): what the client side of a request costs;
- proxied-stub: the proxy against the stub: what the proxy costs when Holdpoint costs nothing.
- read-only / read-only-direct: `get_balance` through the proxy (listed in its config's
               `read_only`: passed straight through, no Holdpoint) and directly;
- error / error-direct: `create_customer` with no email address, whose upstream answers a
               validation error envelope (fix the input; no circuit opens), through the proxy
               (the gate, the call, the envelope posted before the result returns, since its
               directive matters) and directly.
With --stub-only, the series that need a real Holdpoint (proxied, holdpoint, error) are left out.
Each series' upstream keeps its own state file (tests/mcp/upstream_server.py rewrites it on
every call, so one shared file would make every series slower as the run goes on).

Then: "added" = proxied - direct at p50; "proxy own" = added - holdpoint (the proxy beyond the
two round trips the contract asks of every guarded write) and proxied-stub - direct - stub (the
same, measured without Holdpoint's server time). CPU per call is read from /proc for this process
(the client, and the holdpoint/stub series) and for each proxy process. On a loaded machine
wall times stretch roughly with the load average (printed); CPU per call does much less.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM = ROOT / "tests" / "mcp" / "upstream_server.py"
TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_ms(pids: list[int]) -> float:
    """User + system CPU of these processes so far, in ms."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) * TICK_MS
    return total


def pids_with(marker: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found if int(pid) != os.getpid()]


# --- the stub Holdpoint ------------------------------------------------------------------------


def serve_stub(port: int) -> None:
    """A Holdpoint that answers every attempt with a grant and every envelope with `succeeded`,
    at once, on kept-alive connections."""
    import h11

    directive = {"action": "proceed", "may_write": True, "not_before": None, "reason": "attempt_granted"}
    step = {"operation_ref": "stub", "tool": "create_invoice", "state": "in_progress", "attempts": 1}
    step |= {"max_attempts": 3, "decisions": [], "url": "http://stub/steps/1", "directive": directive}
    grant = json.dumps({"attempt": 1, "step": step, "directive": directive}).encode()
    stop = {"action": "stop", "may_write": False, "not_before": None, "reason": "committed"}
    done = step | {"state": "succeeded", "directive": stop}
    ingest = json.dumps({"envelope_id": 1, "correlation_id": "c", "step": done, "directive": stop}).encode()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        target = b""
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await reader.read(65536)
                    conn.receive_data(data)
                    if not data and conn.their_state is not h11.SEND_BODY:
                        return
                elif isinstance(event, h11.Request):
                    target = event.target
                elif isinstance(event, h11.EndOfMessage):
                    body = grant if target.endswith(b"/attempts") else ingest
                    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
                    writer.write(
                        conn.send(h11.Response(status_code=201, headers=headers))
                        + conn.send(h11.Data(data=body))
                        + conn.send(h11.EndOfMessage())
                    )
                    conn.start_next_cycle()
                elif isinstance(event, h11.ConnectionClosed):
                    return
        except (h11.ProtocolError, ConnectionError):
            return
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# --- the series --------------------------------------------------------------------------------


def invoice(tag: str, i: int) -> dict[str, Any]:
    return {"customer": f"cus_{tag}_{i}", "amount": 100 + i}


Call = Callable[[int], Awaitable[float]]  # one call; the milliseconds it took


def clocked(call: Callable[[int], Awaitable[Any]]) -> Call:
    async def timed(i: int) -> float:
        started = time.perf_counter()
        await call(i)
        return (time.perf_counter() - started) * 1000

    return timed


async def session_call(
    stack: AsyncExitStack,
    parameters: Any,
    tag: str,
    errlog: Any = sys.stderr,
    *,
    as_the_proxy: bool = False,
    tools: tuple[str, ...] = ("create_invoice",),
) -> dict[str, Call]:
    """Calls of create_invoice over one ClientSession. `as_the_proxy`: with the `_meta` the proxy
    adds on its way upstream (a new operation_ref per call), so that the upstream server does
    the same work for a direct call as for a proxied one (it files each invoice under its
    operation_ref; without one, every direct call would overwrite the same entry)."""
    from mcp import ClientSession, stdio_client

    read, write = await stack.enter_async_context(stdio_client(parameters, errlog=errlog))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()

    def caller(tool: str) -> Call:
        async def call(i: int) -> None:
            meta = None
            if as_the_proxy and tool != "get_balance":
                ref, run = f"direct-{tag}/{tool}/{i}", f"direct-{tag}"
                meta = {"dev.holdpoint/operation_ref": ref, "dev.holdpoint/run_id": run, "dev.holdpoint/attempt": 1}
            arguments: dict[str, Any] = {} if tool == "get_balance" else invoice(tag, i)
            if tool == "create_customer":
                arguments = {"email": f"not-an-address-{tag}-{i}"}
            result = await session.call_tool(tool, arguments, meta=meta)
            assert result.is_error == (tool == "create_customer"), result

        return clocked(call)

    return {tool: caller(tool) for tool in tools}


async def holdpoint_call(stack: AsyncExitStack, base_url: str, api_key: str, tag: str) -> Call:
    """The two requests the proxy makes for a committed write, from the proxy's own client."""
    from holdpoint_sdk import input_fingerprint
    from holdpoint_sdk.envelopes import now_utc, success_envelope
    from holdpoint_sdk.mcp_proxy.http import LeanAsyncHoldpoint

    hp = await stack.enter_async_context(LeanAsyncHoldpoint(base_url, api_key))
    assert hp.lean

    async def call(i: int) -> None:
        payload = invoice(tag, i)
        ref = f"bench-hp/{tag}/{i}"
        grant = await hp.request_attempt(
            ref,
            tool="create_invoice",
            input_fingerprint=input_fingerprint(payload),
            input=payload,
            run_id=f"bench-{tag}",
            idempotency_key="att_" + uuid.uuid4().hex,
        )
        envelope = success_envelope(
            tool="create_invoice",
            operation_ref=ref,
            occurred_at=now_utc(),
            result={"invoice_id": "inv"},
            attempt=grant["attempt"],
            run_id=f"bench-{tag}",
        )
        await hp.post_envelope(envelope, idempotency_key="env_" + uuid.uuid4().hex)

    return clocked(call)


def breakdown(log: Path, warmup: int) -> str:
    """p50 / p95 of each part of the proxy's timing lines (HOLDPOINT_MCP_TIMINGS), past the warm-up."""
    parts: dict[str, list[float]] = {}
    lines = [line for line in log.read_text().splitlines() if " timing tool=" in line][warmup:]
    for line in lines:
        for word in line.split():
            if word.endswith(tuple("0123456789")) and "_ms=" in word:
                name, value = word.split("_ms=")
                parts.setdefault(name, []).append(float(value))
    return "  ".join(
        f"{name} {percentile(values, 0.5):.2f} / {percentile(values, 0.95):.2f}" for name, values in parts.items()
    )


def summary(name: str, samples: list[float], cpu: float | None) -> str:
    spent = f"  cpu/call {cpu:5.2f} ms" if cpu is not None else ""
    return (
        f"{name:<16} n={len(samples):<4} p50={percentile(samples, 0.5):7.2f} ms  "
        f"p95={percentile(samples, 0.95):7.2f} ms  p99={percentile(samples, 0.99):7.2f} ms  "
        f"mean={statistics.fmean(samples):7.2f} ms{spent}"
    )


async def run(args: argparse.Namespace) -> None:
    from mcp import StdioServerParameters

    tag = uuid.uuid4().hex[:8]
    states = Path(tempfile.mkdtemp())
    env = {
        **os.environ,
        "HOLDPOINT_API_KEY": args.api_key or "hp_stub",
        "PYTHONPATH": os.pathsep.join((str(ROOT), str(ROOT / "sdk"))),  # this tree's SDK, not an install's
        "HOLDPOINT_MCP_TIMINGS": "1",  # one line per call: gate, upstream, envelope, proxy's own ms
    }
    logs = {name: Path(tempfile.mkdtemp()) / f"{name}.log" for name in ("proxied", "proxied-stub")}

    def upstream_env(series: str) -> dict[str, str]:
        return {**env, "UPSTREAM_STATE": str(states / f"{series}.json")}

    config = states / "proxy.json"
    config.write_text(json.dumps({"read_only": ["get_balance"]}))

    def proxy(url: str, marker: str) -> Any:
        command = ["-m", "holdpoint_sdk.mcp_proxy", "--url", url, "--run-id", f"bench-{tag}-{marker}"]
        command += ["--config", str(config)]
        command += ["--send-input", args.send_input, "--", sys.executable, str(UPSTREAM)]
        return StdioServerParameters(command=sys.executable, args=command, env=upstream_env(marker), cwd=str(ROOT))

    stub_port = args.stub_port
    stub = subprocess.Popen([sys.executable, __file__, "--serve-stub", str(stub_port)])
    stub_url = f"http://127.0.0.1:{stub_port}"
    try:
        await asyncio.sleep(1.0)
        direct = StdioServerParameters(
            command=sys.executable, args=[str(UPSTREAM)], env=upstream_env("direct"), cwd=str(ROOT)
        )
        async with AsyncExitStack() as stack:
            three = ("create_invoice", "get_balance", "create_customer")
            direct_calls = await session_call(stack, direct, f"d{tag}", as_the_proxy=True, tools=three)
            calls = {"direct": direct_calls["create_invoice"]}
            if not args.stub_only:
                real = await session_call(
                    stack,
                    proxy(args.base_url, "real"),
                    f"p{tag}",
                    stack.enter_context(logs["proxied"].open("w")),
                    tools=three,
                )
                calls["proxied"] = real["create_invoice"]
                calls["holdpoint"] = await holdpoint_call(stack, args.base_url, args.api_key, f"h{tag}")
                calls["read-only-direct"] = direct_calls["get_balance"]
                calls["read-only"] = real["get_balance"]
                calls["error-direct"] = direct_calls["create_customer"]
                calls["error"] = real["create_customer"]
            calls["stub"] = await holdpoint_call(stack, stub_url, "hp_stub", f"s{tag}")
            stubbed = await session_call(
                stack, proxy(stub_url, "stub"), f"q{tag}", stack.enter_context(logs["proxied-stub"].open("w"))
            )
            calls["proxied-stub"] = stubbed["create_invoice"]
            real_pids = pids_with(f"bench-{tag}-real")
            proxies = {"proxied": real_pids, "read-only": real_pids, "error": real_pids}
            proxies["proxied-stub"] = pids_with(f"bench-{tag}-stub")
            server_match = args.server_match or urlsplit(args.base_url).netloc
            server = pids_with(server_match) + (pids_with(args.db_match) if args.db_match else [])
            server_cpu = 0.0
            results: dict[str, list[float]] = {name: [] for name in calls}
            cpu: dict[str, float] = dict.fromkeys(calls, 0.0)
            load_before = os.getloadavg()[0]
            for i in range(-args.warmup, args.n):
                for name, call in calls.items():
                    watched = proxies.get(name, [])
                    own_before, watched_before = time.process_time(), cpu_ms(watched)
                    server_before = cpu_ms(server) if name == "holdpoint" else 0.0
                    took = await call(i)
                    if i >= 0:
                        results[name].append(took)
                        if name == "holdpoint":
                            server_cpu += cpu_ms(server) - server_before
                        if name in ("holdpoint", "stub"):
                            cpu[name] += (time.process_time() - own_before) * 1000
                        elif watched:
                            cpu[name] += cpu_ms(watched) - watched_before
    finally:
        stub.terminate()
        stub.wait(timeout=10)
    print(f"load average: {load_before:.2f} before, {os.getloadavg()[0]:.2f} after ({os.cpu_count()} cores)")
    where = "" if args.stub_only else f"Holdpoint at {args.base_url}; "
    print(f"{where}the stub at {stub_url}; cpu/call: the proxy process, or this one")
    for name, samples in results.items():
        print(summary(name, samples, cpu[name] / len(samples) if cpu[name] else None))
    if not args.stub_only:
        print(
            f"Holdpoint's CPU for the two requests (processes matching {server_match!r}"
            + (f" and {args.db_match!r}" if args.db_match else "")
            + f", {len(server)} found): {server_cpu / len(results['holdpoint']):.2f} ms per call"
        )
    for name, log in logs.items():
        if name in results:
            print(f"inside the proxy, {name} (its own clock; p50 / p95 ms):  " + breakdown(log, args.warmup))
    p50 = {name: percentile(samples, 0.5) for name, samples in results.items()}
    if not args.stub_only:
        added = p50["proxied"] - p50["direct"]
        print(f"added by the proxy at p50: {added:.2f} ms (Holdpoint's two requests: {p50['holdpoint']:.2f} ms)")
        print(f"proxy own at p50 (proxied - direct - holdpoint): {added - p50['holdpoint']:.2f} ms")
        p99 = {name: percentile(samples, 0.99) for name, samples in results.items()}
        for series, base in (("proxied", "direct"), ("read-only", "read-only-direct"), ("error", "error-direct")):
            print(
                f"added by the proxy to {series}: p50 {p50[series] - p50[base]:.2f} ms, "
                f"p99 {p99[series] - p99[base]:.2f} ms"
            )
    stub_added = p50["proxied-stub"] - p50["direct"]
    print(
        f"added against the stub at p50 (proxied-stub - direct): {stub_added:.2f} ms"
        f" (of which the two stub requests: {p50['stub']:.2f} ms)"
    )
    print(f"proxy own at p50 against the stub (proxied-stub - direct - stub): {stub_added - p50['stub']:.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--base-url", default=os.environ.get("HOLDPOINT_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--api-key", default=os.environ.get("HOLDPOINT_API_KEY", ""))
    parser.add_argument("-n", type=int, default=300, help="calls per series")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--send-input", choices=("auto", "always", "never"), default="auto")
    parser.add_argument("--stub-port", type=int, default=8799, help="where the stub Holdpoint listens")
    parser.add_argument("--server-match", help="pgrep -f pattern of Holdpoint's processes (default: host:port)")
    parser.add_argument("--db-match", help="pgrep -f pattern of its database backends, e.g. the database name")
    parser.add_argument("--stub-only", action="store_true", help="only the series that need no Holdpoint")
    parser.add_argument("--serve-stub", type=int, metavar="PORT", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.serve_stub:
        serve_stub(arguments.serve_stub)
        sys.exit(0)
    if not arguments.api_key and not arguments.stub_only:
        parser.error("an API key is needed (--api-key or HOLDPOINT_API_KEY)")
    asyncio.run(run(arguments))
