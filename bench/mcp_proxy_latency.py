"""What `holdpoint-mcp` adds to a tool call: p50/p95 of the same tools/call made directly to an
MCP server and through the proxy, against a running Holdpoint.

    .venv/bin/python bench/mcp_proxy_latency.py --base-url http://127.0.0.1:8000 --api-key hp_... [-n 300]

Three series, each with a fresh input per call (so every guarded call is a new step that
commits: attempt gate, upstream call, envelope):
- direct:    an MCP ClientSession -> tests/mcp/upstream_server.py (stdio);
- holdpoint: the two Holdpoint requests the proxy makes per call (the attempt gate and the
             envelope, each with an Idempotency-Key as the proxy sends them), from the SDK's
             async client alone;
- proxied:   an MCP ClientSession -> holdpoint-mcp -> the same upstream;
- logic:     the proxy's own code per call, in this process (HoldpointProxy.call_tool minus the
             time spent waiting for Holdpoint and the upstream).
"proxy own" is proxied - direct - holdpoint at p50: what the proxy costs beyond the two round
trips the contract asks of every guarded write (its code, and the extra stdio hop).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
from holdpoint_sdk import AsyncHoldpoint, input_fingerprint
from holdpoint_sdk.envelopes import now_utc, success_envelope
from holdpoint_sdk.mcp_proxy.config import ProxyConfig
from holdpoint_sdk.mcp_proxy.proxy import HoldpointProxy, SessionUpstream
from mcp import ClientSession, StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM = ROOT / "tests" / "mcp" / "upstream_server.py"


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def invoice(tag: str, i: int) -> dict[str, Any]:
    return {"customer": f"cus_{tag}_{i}", "amount": 100 + i}


Call = Callable[[int], Awaitable[float]]  # one call; the milliseconds it counts


def clocked(call: Callable[[int], Awaitable[Any]]) -> Call:
    async def timed(i: int) -> float:
        started = time.perf_counter()
        await call(i)
        return (time.perf_counter() - started) * 1000

    return timed


async def session_call(stack: AsyncExitStack, parameters: StdioServerParameters, tag: str) -> Call:
    read, write = await stack.enter_async_context(stdio_client(parameters))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()

    async def call(i: int) -> None:
        result = await session.call_tool("create_invoice", invoice(tag, i))
        assert not result.is_error, result

    return clocked(call)


async def holdpoint_call(stack: AsyncExitStack, base_url: str, api_key: str, tag: str) -> Call:
    hp = await stack.enter_async_context(AsyncHoldpoint(base_url, api_key))

    async def call(i: int) -> None:
        payload = invoice(tag, i)
        ref = f"bench-hp/{tag}/{i}"
        grant = await hp.request_attempt(
            ref,
            tool="create_invoice",
            input_fingerprint=input_fingerprint(payload),
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


class _Waits:
    """Adds up the time one call spends waiting for Holdpoint or the upstream."""

    def __init__(self) -> None:
        self.ms = 0.0

    def wrap(self, call: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def waited(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await call(*args, **kwargs)
            finally:
                self.ms += (time.perf_counter() - started) * 1000

        return waited


async def logic_call(
    stack: AsyncExitStack, parameters: StdioServerParameters, base_url: str, api_key: str, tag: str
) -> Call:
    """The proxy's code in this process: a call's time minus its waits for Holdpoint and the upstream."""
    read, write = await stack.enter_async_context(stdio_client(parameters))
    session = await stack.enter_async_context(ClientSession(read, write))
    hp = await stack.enter_async_context(AsyncHoldpoint(base_url, api_key))
    await session.initialize()
    waits = _Waits()
    upstream = SessionUpstream(session)
    upstream.request = waits.wrap(upstream.request)  # type: ignore[method-assign]
    hp.request_attempt = waits.wrap(hp.request_attempt)  # type: ignore[method-assign]
    hp.post_envelope = waits.wrap(hp.post_envelope)  # type: ignore[method-assign]
    config = ProxyConfig(url=base_url, api_key=api_key, run_id=f"bench-{tag}", send_input="never")
    proxy = HoldpointProxy(config, hp, upstream)

    async def call(i: int) -> float:
        waits.ms = 0.0
        started = time.perf_counter()
        result = await proxy.call_tool({"name": "create_invoice", "arguments": invoice(tag, i)})
        assert not result.get("isError"), result
        return (time.perf_counter() - started) * 1000 - waits.ms

    return call


def summary(name: str, samples: list[float]) -> str:
    return (
        f"{name:<10} n={len(samples):<4} p50={percentile(samples, 0.5):7.2f} ms  "
        f"p95={percentile(samples, 0.95):7.2f} ms  mean={statistics.fmean(samples):7.2f} ms"
    )


async def main(args: argparse.Namespace) -> None:
    tag = uuid.uuid4().hex[:8]
    state = Path(tempfile.mkdtemp()) / "upstream.json"
    env = {
        **os.environ,
        "UPSTREAM_STATE": str(state),
        "HOLDPOINT_URL": args.base_url,
        "HOLDPOINT_API_KEY": args.api_key,
        "HOLDPOINT_RUN_ID": f"bench-{tag}",
        "PYTHONPATH": str(ROOT),
    }
    direct = StdioServerParameters(command=sys.executable, args=[str(UPSTREAM)], env=env, cwd=str(ROOT))
    proxied = StdioServerParameters(
        command=sys.executable,
        args=["-m", "holdpoint_sdk.mcp_proxy", "--send-input", args.send_input, "--", sys.executable, str(UPSTREAM)],
        env=env,
        cwd=str(ROOT),
    )
    async with AsyncExitStack() as stack:
        calls = {
            "direct": await session_call(stack, direct, f"d{tag}"),
            "holdpoint": await holdpoint_call(stack, args.base_url, args.api_key, f"h{tag}"),
            "proxied": await session_call(stack, proxied, f"p{tag}"),
            "logic": await logic_call(stack, direct, args.base_url, args.api_key, f"l{tag}"),
        }
        results: dict[str, list[float]] = {name: [] for name in calls}
        # Interleaved call by call, so that the machine's load swings hit every series alike.
        for i in range(-args.warmup, args.n):
            for name, call in calls.items():
                took = await call(i)
                if i >= 0:
                    results[name].append(took)
    for name, samples in results.items():
        print(summary(name, samples))
    p50 = {name: percentile(samples, 0.5) for name, samples in results.items()}
    added = p50["proxied"] - p50["direct"]
    print(f"added by the proxy at p50: {added:.2f} ms (of which Holdpoint's two requests: {p50['holdpoint']:.2f} ms)")
    print(f"proxy own at p50 (proxied - direct - holdpoint): {added - p50['holdpoint']:.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default=os.environ.get("HOLDPOINT_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--api-key", default=os.environ.get("HOLDPOINT_API_KEY", ""))
    parser.add_argument("-n", type=int, default=300, help="calls per series")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--send-input", choices=("auto", "always", "never"), default="auto")
    arguments = parser.parse_args()
    if not arguments.api_key:
        parser.error("an API key is needed (--api-key or HOLDPOINT_API_KEY)")
    anyio.run(main, arguments)
