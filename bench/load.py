"""Closed-loop HTTP load on 127.0.0.1, one target at a time, alternating, with RSS sampling.

    python bench/load.py --target ingest=http://127.0.0.1:8701/api/v1/envelopes@PID \
                         --target floor=http://127.0.0.1:8702/floor@PID --api-key hp_...

Each target is a URL and the pid of its gunicorn master. Rounds alternate between the targets
(floor, ingest, floor, ingest, ...) so that machine noise hits both alike. In a round, N
connections each POST one envelope at a time (a closed loop: a connection sends the next request
when the answer to the previous one has arrived) for a warm-up, which is not counted, then for a
fixed duration or a fixed number of requests. Every body is seed 000's invalid-address envelope
with a unique operation_ref, so every ingest creates a new step. Any status but 201 is an error.

Printed per target: requests/s, p50/p99/max latency, errors, the CPU the target's gunicorn
processes and PostgreSQL spent per request, and the peak RSS of the master and each worker
(sampled from /proc every 0.5 s) with the trend of each worker's RSS over the measured phases
(first-quarter vs last-quarter mean). Then the ratio ingest/floor against the issue's target.

The default client writes HTTP/1.1 on raw asyncio streams: it costs a fraction of httpx's CPU per
request, and on a 2-core machine every client cycle is a cycle the servers do not get
(`--client httpx` to compare). Load is bounded: at most 64 connections, loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

MAX_CONNECTIONS = 64
MAX_DURATION_S = 3600.0
MAX_REQUESTS = 5_000_000
REQUEST_TIMEOUT_S = 30.0  # an answer slower than this is an error (status 0), not a hang
SAMPLE_EVERY_S = 0.5
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
REF_MARK = b"@@OPERATION_REF@@"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

# Seed 000's invalid recipient address (tests/conftest.py `error_envelope`): a valid canonical
# error envelope that moves a new step to needs_input.
ENVELOPE: dict[str, Any] = {
    "ok": False,
    "tool": "send_email",
    "operation_ref": REF_MARK.decode(),
    "code": "INVALID_RECIPIENT_ADDRESS",
    "category": "validation",
    "commit_state": "not_committed",
    "retry": {"directive": "after_input_fix", "max_attempts_remaining": 1},
    "next_action": "correct_input",
    "safe_details": {"field": "recipient_email"},
    "agent_message": "recipient_email is invalid; request a corrected address.",
    "user_message": "I need a valid recipient address before I can send this.",
}


# An approval request (bench/notifications_cost.py's): a new step held for a reviewer, the case
# where notification channels write a notice each (targets named held*).
HELD_ENVELOPE: dict[str, Any] = {
    "ok": False,
    "tool": "charge_card",
    "operation_ref": REF_MARK.decode(),
    "code": "AMOUNT_OVER_LIMIT",
    "category": "authorization",
    "commit_state": "not_committed",
    "retry": {"directive": "never", "max_attempts_remaining": 0},
    "next_action": "request_approval",
    "safe_details": {"limit": "1000"},
}

# A guarded call's report of success (targets named guarded*: the gate, then this, for one ref).
SUCCESS_ENVELOPE: dict[str, Any] = {
    "ok": True,
    "tool": "send_email",
    "operation_ref": REF_MARK.decode(),
    "commit_state": "committed",
}

# The attempt gate's body (targets named attempt*): a new step's first attempt, granted.
ATTEMPT: dict[str, Any] = {"tool": "send_email", "input_fingerprint": "0" * 64}

# About 1 KiB of tool input (targets named attempt-input*): what an agent sends with each attempt
# since contract v1.1, so that a reviewer sees what the approval binds.
ATTEMPT_INPUT: dict[str, Any] = {
    "to": "customer@example.com",
    "cc": ["billing@example.com", "support@example.com"],
    "subject": "Your invoice INV-2026-00481 is ready",
    "body": ("Hello, your invoice for the period is attached. " * 14).strip(),
    "attachments": [{"name": "INV-2026-00481.pdf", "size": 48213, "sha256": "ab" * 32}],
    "options": {"track_opens": False, "priority": "normal", "locale": "en-GB", "retries": 2},
}


def jcs_sha256(value: Any) -> str:
    """The contract's input_fingerprint: SHA-256 of the RFC 8785 form (rfc8785, as the server)."""
    import hashlib

    import rfc8785

    return hashlib.sha256(rfc8785.dumps(value)).hexdigest()


# --- targets and bodies ------------------------------------------------------------------------


@dataclass
class Target:
    name: str
    url: str
    pid: int | None
    host: str = ""
    port: int = 0
    path: str = ""

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme != "http" or parts.hostname not in LOOPBACK:
            raise SystemExit(f"load.py: {self.url}: only http:// on the loopback interface")
        self.host, self.port, self.path = parts.hostname, parts.port or 80, parts.path or "/"


def parse_target(text: str) -> Target:
    name, sep, rest = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError("NAME=URL[@PID]")
    url, _, pid = rest.rpartition("@") if "@" in rest else (rest, "", "")
    return Target(name=name, url=url, pid=int(pid) if pid else None)


def kind_of(name: str) -> str:
    """What a target is sent, by its name: attempt-input*, attempt-rules* (the same ~1 KiB input,
    for the team with 50 rules and a grant: bench_setup.py), attempt*, held*, guarded* (a pair:
    the ~1 KiB input's gate call, then its success envelope, both keyed), or an envelope."""
    for kind in ("attempt-input", "attempt-rules", "attempt", "held", "guarded"):
        if name.startswith(kind):
            return kind
    return "envelope"


def parse_key(text: str) -> tuple[str, str]:
    name, sep, key = text.partition("=")
    if not sep or not name or not key:
        raise argparse.ArgumentTypeError("NAME=KEY")
    return name, key


class Bodies:
    """Request bytes with a fresh operation_ref each time, without re-encoding the JSON.

    Envelopes carry the ref in the body; the attempt gate takes it in the path
    (`/api/v1/steps/<ref>/attempts`: the target's URL names `{ref}` there)."""

    def __init__(self, target: Target, api_key: str, run_tag: str) -> None:
        self.kind = kind_of(target.name)
        self.prefix = f"bench/{run_tag}/{target.name}/".encode()
        if self.kind == "guarded":
            self.success_before, _, self.success_after = (
                json.dumps(SUCCESS_ENVELOPE, separators=(",", ":")).encode().partition(REF_MARK)
            )
        if self.kind.startswith("attempt") or self.kind == "guarded":
            body = dict(ATTEMPT)
            if self.kind in ("attempt-input", "attempt-rules", "guarded"):
                body |= {"input": ATTEMPT_INPUT, "input_fingerprint": jcs_sha256(ATTEMPT_INPUT)}
            self.fixed = json.dumps(body, separators=(",", ":")).encode()
            self.prefix = self.prefix.replace(b"/", b"%2F")
            if "{ref}" not in target.path:
                raise SystemExit(f"load.py: {target.name}: an attempt target's URL names {{ref}} in its path")
            self.path_before, _, self.path_after = target.path.encode().partition(b"{ref}")
        else:
            template = json.dumps(HELD_ENVELOPE if self.kind == "held" else ENVELOPE, separators=(",", ":"))
            self.before, _, self.after = template.encode().partition(REF_MARK)
        self.headers = {
            "Content-Type": "application/json",
            "Authorization": f"Bearer {api_key}",
        }
        self.tail = (
            f" HTTP/1.1\r\nHost: {target.host}:{target.port}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in self.headers.items())
            + "Content-Length: "
        ).encode()
        self.head = f"POST {target.path}".encode() + self.tail
        # `*-keyed`: every request with an Idempotency-Key of its own, as the SDK's guard and
        # holdpoint-mcp send every gate and envelope (and so a guarded call's pair).
        self.keyed = target.name.removesuffix("-b").endswith("-keyed") or self.kind == "guarded"
        self.envelope_head = self.head.replace(target.path.encode(), b"/api/v1/envelopes", 1)

    def ref(self) -> bytes:
        return self.prefix + uuid.uuid4().hex.encode()

    def body(self) -> bytes:
        """An envelope's body (the httpx client posts envelopes only)."""
        return self.before + self.ref() + self.after

    def unit(self) -> list[bytes]:
        """The requests of one measured unit, sent one after the other on one connection: one
        request, or a guarded call's gate call and then its success envelope for the same ref."""
        if self.kind != "guarded":
            return [self.request()]
        ref = uuid.uuid4().hex.encode()
        gate_path = self.path_before + self.prefix + ref + self.path_after  # the prefix %2F-encoded
        envelope = self.success_before + self.prefix.replace(b"%2F", b"/") + ref + self.success_after
        return [
            b"POST " + gate_path + self.tail[:-16] + self._key() + self.tail[-16:] + self._length(self.fixed),
            self.envelope_head[:-16] + self._key() + self.envelope_head[-16:] + self._length(envelope),
        ]

    @staticmethod
    def _key() -> bytes:
        return b"Idempotency-Key: " + uuid.uuid4().hex.encode() + b"\r\n"

    def request(self) -> bytes:
        key = self._key() if self.keyed else b""
        if self.kind.startswith("attempt"):
            path = self.path_before + self.ref() + self.path_after
            return b"POST " + path + self.tail[:-16] + key + self.tail[-16:] + self._length(self.fixed)
        body = self.body()
        return self.head[:-16] + key + self.head[-16:] + self._length(body)

    @staticmethod
    def _length(body: bytes) -> bytes:
        """What follows "Content-Length: " (the last 16 bytes of the head): the length and the body."""
        return str(len(body)).encode() + b"\r\n\r\n" + body


# --- one round ---------------------------------------------------------------------------------


@dataclass
class Round:
    target: Target
    number: int
    stop_at: float = math.inf
    measure_from: float = math.inf
    measure_to: float = math.inf
    requests_goal: int | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    samples: list[tuple[float, float, int]] = field(default_factory=list)  # (start, end, status)
    error_bodies: list[str] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)

    def record(self, start: float, end: float, status: int, body: bytes = b"") -> None:
        self.samples.append((start, end, status))
        if status != 201 and len(self.error_bodies) < 3:
            self.error_bodies.append(f"{status}: {body[:300]!r}")
        if self.requests_goal is not None and end >= self.measure_from:
            self.requests_goal -= 1
            if self.requests_goal == 0:
                self.done.set()

    def measured(self) -> list[tuple[float, float, int]]:
        return [s for s in self.samples if self.measure_from <= s[1] <= self.measure_to]


class ConnectionClosedError(Exception):
    pass


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """One HTTP/1.1 response: (status, body, server closes the connection)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as error:
        raise ConnectionClosedError() from error
    status = int(head[9:12])
    lowered = head.lower()
    closes = b"\r\nconnection: close" in lowered
    index = lowered.find(b"\r\ncontent-length:")
    if index != -1:
        end = lowered.index(b"\r\n", index + 2)
        body = await reader.readexactly(int(lowered[index + 17 : end]))
    elif b"\r\ntransfer-encoding: chunked" in lowered:
        chunks = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                break
            chunks.append(chunk[:-2])
        body = b"".join(chunks)
    else:
        body = await reader.read() if closes else b""
    return status, body, closes


async def raw_connection(round_: Round, bodies: Bodies) -> None:
    target = round_.target
    reader = writer = None
    try:
        while time.perf_counter() < round_.stop_at:
            if writer is None:
                try:
                    reader, writer = await asyncio.open_connection(target.host, target.port)
                except OSError:
                    now = time.perf_counter()
                    round_.record(now, now, 0)
                    await asyncio.sleep(0.05)
                    continue
            assert reader is not None
            start = time.perf_counter()
            try:
                status, body = 0, b""
                for request in bodies.unit():  # a guarded call's pair is one unit, one sample
                    if writer is None:
                        reader, writer = await asyncio.open_connection(target.host, target.port)
                    assert reader is not None
                    writer.write(request)
                    status, body, closes = await asyncio.wait_for(read_response(reader), REQUEST_TIMEOUT_S)
                    if closes:  # gunicorn's sync workers close after every answer
                        writer.close()
                        reader = writer = None
                    if status != 201:
                        break
            except (OSError, ConnectionClosedError, asyncio.IncompleteReadError, ValueError, TimeoutError):
                round_.record(start, time.perf_counter(), 0)
                if writer is not None:
                    writer.close()
                reader = writer = None
                continue
            round_.record(start, time.perf_counter(), status, body)
    finally:
        if writer is not None:
            writer.close()


async def httpx_connection(round_: Round, bodies: Bodies, client: Any) -> None:
    import httpx

    while time.perf_counter() < round_.stop_at:
        start = time.perf_counter()
        try:
            response = await client.post(round_.target.url, content=bodies.body(), headers=bodies.headers)
        except httpx.HTTPError:
            round_.record(start, time.perf_counter(), 0)
            await asyncio.sleep(0.01)
            continue
        round_.record(start, time.perf_counter(), response.status_code, response.content)


# --- /proc: RSS and CPU --------------------------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return None
    return text[text.rindex(")") + 2 :].split()  # fields from `state` on


def process_tree(root: int) -> list[int]:
    """The root and all its descendants (gunicorn's master and its workers)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None:
                parents.setdefault(int(fields[1]), []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(parents.get(pid, []))
    return tree


def rss_kb(pid: int) -> int | None:
    """VmRSS of /proc/<pid>/status, in kB."""
    for line in (_read(f"/proc/{pid}/status") or "").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


def cpu_by_pid(pids: list[int]) -> dict[int, float]:
    answer = {}
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None:
            answer[pid] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime
    return answer


def bench_backends(database: str) -> list[int]:
    """PostgreSQL backends serving the bench database (their title names it): other work on the
    same server is not counted."""
    needle = f" {database} "
    pids = []
    for entry in os.listdir("/proc"):
        if (
            entry.isdigit()
            and (_read(f"/proc/{entry}/comm") or "").strip() == "postgres"
            and needle in (_read(f"/proc/{entry}/cmdline") or "").replace("\0", " ")
        ):
            pids.append(int(entry))
    return pids


def machine_busy() -> tuple[float, float]:
    """CPU seconds of the whole machine since boot: busy (all but idle, iowait and steal), and
    stolen (a virtual machine's CPU that its host gave to others)."""
    text = _read("/proc/stat") or "cpu 0 0 0 0 0 0 0 0"
    values = [int(v) for v in text.splitlines()[0].split()[1:9]]
    values += [0] * (8 - len(values))
    return (sum(values[:7]) - values[3] - values[4]) / CLOCK_TICKS, values[7] / CLOCK_TICKS


@dataclass
class CpuSnapshot:
    server: dict[int, float]
    postgres: dict[int, float]
    client: float
    busy: float
    stolen: float
    at: float


def cpu_snapshot(target: Target, database: str) -> CpuSnapshot:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    busy, stolen = machine_busy()
    return CpuSnapshot(
        server=cpu_by_pid(process_tree(target.pid)) if target.pid else {},
        postgres=cpu_by_pid(bench_backends(database)),
        client=usage.ru_utime + usage.ru_stime,
        busy=busy,
        stolen=stolen,
        at=time.perf_counter(),
    )


def cpu_spent(before: CpuSnapshot, after: CpuSnapshot, seen: dict[str, dict[int, float]]) -> dict[str, float]:
    """CPU seconds in the interval. A process born in it counts from zero; one that exited in it
    (Django closes a connection older than CONN_MAX_AGE, so its backend exits) counts up to its
    last sample in `seen`, taken every SAMPLE_EVERY_S during the round."""

    def spent(b: dict[int, float], a: dict[int, float], last: dict[int, float]) -> float:
        return sum(a.get(pid, last.get(pid, 0.0)) - b.get(pid, 0.0) for pid in set(a) | set(last))

    server = spent(before.server, after.server, seen.get("server", {}))
    postgres = spent(before.postgres, after.postgres, seen.get("postgres", {}))
    client = after.client - before.client
    busy = after.busy - before.busy
    stolen = after.stolen - before.stolen
    capacity = (after.at - before.at) * (os.cpu_count() or 1)
    return {
        "server": server,
        "postgres": postgres,
        "client": client,
        "other": max(0.0, busy - server - postgres - client),
        # Neither busy nor stolen: no process had work for a CPU (its requests waited: on locks,
        # the disk, or a gunicorn worker serving more connections than its one core could), so
        # the target was not CPU-bound in that round.
        "idle": max(0.0, capacity - busy - stolen),
        "stolen": stolen,
        "capacity": capacity,
    }


@dataclass
class RssSample:
    at: float
    target: str
    pid: int
    role: str
    kb: int
    phase: str  # "<target>#<round>" while that target is measured, "warm" or "idle" otherwise


class RssSampler:
    """RSS of every gunicorn process, and the CPU of the measured target's processes and of the
    bench database's backends (so that one that exits mid-round is still counted)."""

    def __init__(self, targets: list[Target], database: str) -> None:
        self.targets = [t for t in targets if t.pid]
        self.database = database
        self.samples: list[RssSample] = []
        self.phase = "idle"
        self.started = time.perf_counter()
        self.measured: Target | None = None
        self.cpu_seen: dict[str, dict[int, float]] = {}

    def measure(self, target: Target | None) -> None:
        self.measured = target
        self.cpu_seen = {"server": {}, "postgres": {}}

    def sample(self) -> None:
        if self.measured is not None:
            if self.measured.pid:
                self.cpu_seen["server"].update(cpu_by_pid(process_tree(self.measured.pid)))
            self.cpu_seen["postgres"].update(cpu_by_pid(bench_backends(self.database)))
        now = time.perf_counter() - self.started
        for target in self.targets:
            assert target.pid is not None
            for pid in process_tree(target.pid):
                kb = rss_kb(pid)
                if kb is not None:
                    role = "master" if pid == target.pid else "worker"
                    self.samples.append(RssSample(now, target.name, pid, role, kb, self.phase))

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(SAMPLE_EVERY_S)


# --- running rounds ----------------------------------------------------------------------------


async def wait_for_port(target: Target, timeout: float = 60.0) -> None:
    deadline = time.perf_counter() + timeout
    while True:
        try:
            _, writer = await asyncio.open_connection(target.host, target.port)
        except OSError:
            if time.perf_counter() > deadline:
                raise SystemExit(f"load.py: {target.name} is not listening on {target.port}") from None
            await asyncio.sleep(0.2)
            continue
        writer.close()
        return


async def prime(target: Target, bodies: Bodies, connections: int, requests: int) -> None:
    """Unmeasured requests on every connection, so that each worker has imported its URLconf
    and opened its database connection before any round (a cold worker needs seconds)."""

    async def one_connection() -> None:
        reader, writer = await asyncio.open_connection(target.host, target.port)
        try:
            for _ in range(requests):
                for request in bodies.unit():
                    writer.write(request)
                    status, body, closes = await read_response(reader)
                    if status != 201:
                        raise SystemExit(f"load.py: {target.name} answered {status} while priming: {body[:300]!r}")
                    if closes:
                        writer.close()
                        reader, writer = await asyncio.open_connection(target.host, target.port)
        finally:
            writer.close()

    await asyncio.gather(*(one_connection() for _ in range(connections)))


async def preflight(target: Target, bodies: Bodies) -> str:
    """One request: a target that does not answer 201 stops the run before any load."""
    status, body = 0, b""
    for request in bodies.unit():
        reader, writer = await asyncio.open_connection(target.host, target.port)
        try:
            writer.write(request)
            status, body, _ = await read_response(reader)
        finally:
            writer.close()
        if status != 201:
            break
    if status != 201:
        raise SystemExit(f"load.py: {target.name} answered {status} to a valid envelope: {body[:500]!r}")
    return ", ".join(sorted(json.loads(body)))


async def run_round(round_: Round, bodies: Bodies, args: argparse.Namespace, sampler: RssSampler) -> None:
    start = time.perf_counter()
    round_.measure_from = start + args.warmup
    if args.requests:
        round_.requests_goal = args.requests
    else:
        round_.stop_at = round_.measure_from + args.duration
    client = None
    if args.client == "httpx":
        import httpx

        if bodies.kind.startswith("attempt"):
            raise SystemExit("load.py: --client httpx sends envelopes only")

        limits = httpx.Limits(max_connections=args.connections, max_keepalive_connections=args.connections)
        client = httpx.AsyncClient(limits=limits, timeout=REQUEST_TIMEOUT_S)
        tasks = [asyncio.create_task(httpx_connection(round_, bodies, client)) for _ in range(args.connections)]
    else:
        tasks = [asyncio.create_task(raw_connection(round_, bodies)) for _ in range(args.connections)]
    sampler.phase = "warm"
    await asyncio.sleep(args.warmup)
    sampler.phase = f"{round_.target.name}#{round_.number}"
    before = cpu_snapshot(round_.target, args.database)
    sampler.measure(round_.target)
    if args.requests:
        try:
            await asyncio.wait_for(round_.done.wait(), MAX_DURATION_S)
        except TimeoutError:
            print(f"load.py: {round_.target.name}: {args.requests} requests took over {MAX_DURATION_S:g} s")
        round_.stop_at = time.perf_counter()
    else:
        await asyncio.sleep(max(0.0, round_.stop_at - time.perf_counter()))
    round_.measure_to = time.perf_counter()
    after = cpu_snapshot(round_.target, args.database)
    seen = sampler.cpu_seen
    sampler.measure(None)
    sampler.phase = "idle"
    round_.stop_at = min(round_.stop_at, round_.measure_to)
    await asyncio.gather(*tasks)
    if client is not None:
        await client.aclose()
    round_.cpu = cpu_spent(before, after, seen)


# --- figures -----------------------------------------------------------------------------------


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


@dataclass
class Figures:
    requests: int
    errors: Counter[int]
    seconds: float
    p50: float
    p99: float
    max: float
    cpu: dict[str, float]

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def per_request_ms(self, key: str) -> float:
        return 1000 * self.cpu.get(key, 0.0) / self.requests if self.requests else math.nan

    @property
    def total_cpu_ms(self) -> float:
        """CPU per request of everything the benchmark runs: app, PostgreSQL, load script."""
        return sum(self.per_request_ms(key) for key in ("server", "postgres", "client"))

    @property
    def rate_alone(self) -> float:
        """The rate scaled up by the CPU the neighbours took: what the machine alone would give if
        the target is CPU-bound (an estimate, for comparing rounds on a shared machine)."""
        free = 1.0 - self.share("other")
        return self.rate / free if free > 0.05 else math.nan

    def share(self, part: str) -> float:
        """The share of the machine's CPU capacity in `part`: "other" (processes outside the
        benchmark), "idle", "stolen"."""
        capacity = self.cpu.get("capacity", 0.0)
        return self.cpu.get(part, 0.0) / capacity if capacity else math.nan


def figures(rounds: list[Round]) -> Figures:
    latencies: list[float] = []
    errors: Counter[int] = Counter()
    ok = 0
    seconds = 0.0
    cpu: Counter[str] = Counter()
    for round_ in rounds:
        seconds += round_.measure_to - round_.measure_from
        for start, end, status in round_.measured():
            if status == 201:
                ok += 1
                latencies.append(end - start)
            else:
                errors[status] += 1
        cpu.update(round_.cpu)
    latencies.sort()
    return Figures(
        requests=ok,
        errors=errors,
        seconds=seconds,
        p50=1000 * percentile(latencies, 0.50),
        p99=1000 * percentile(latencies, 0.99),
        max=1000 * (latencies[-1] if latencies else math.nan),
        cpu=dict(cpu),
    )


def row(name: str, f: Figures) -> str:
    errors = sum(f.errors.values())
    return (
        f"{name:<10} {f.requests:>8} {errors:>6} {f.rate:>8.1f} {f.p50:>7.1f} {f.p99:>7.1f} {f.max:>7.1f}"
        f" {f.per_request_ms('server'):>8.2f} {f.per_request_ms('postgres'):>8.2f}"
        f" {f.per_request_ms('client'):>8.2f} {100 * f.share('other'):>5.0f}% {f.rate_alone:>8.1f}"
        f" {100 * f.share('idle'):>4.0f}% {100 * f.share('stolen'):>5.0f}%"
    )


HEADER = (
    f"{'target':<10} {'requests':>8} {'errors':>6} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}"
    f" {'app cpu':>8} {'pg cpu':>8} {'load cpu':>8} {'others':>6} {'~alone':>8} {'idle':>5} {'stolen':>6}"
)
CPU_NOTE = (
    "(cpu: CPU ms per request spent by the target's gunicorn, by the bench database's PostgreSQL\n"
    "       backends, by this load script; others: share of the machine's CPU taken by everything else;\n"
    "       ~alone: req/s / (1 - others), the rate the machine alone would give a CPU-bound target;\n"
    "       idle: share of the CPU no process wanted (a round with much of it was not CPU-bound: its\n"
    "       requests waited on something else); stolen: share the virtual machine's host withheld)"
)


def rss_report(sampler: RssSampler, target: Target, limit_mb: float) -> list[str]:
    lines = []
    by_pid: dict[int, list[RssSample]] = {}
    for sample in sampler.samples:
        if sample.target == target.name:
            by_pid.setdefault(sample.pid, []).append(sample)
    for pid, samples in sorted(by_pid.items(), key=lambda item: (item[1][0].role != "master", item[0])):
        peak = max(s.kb for s in samples) / 1024
        loaded = [s.kb / 1024 for s in samples if s.phase.startswith(f"{target.name}#")]
        trend = "n/a"
        if len(loaded) >= 8:
            quarter = len(loaded) // 4
            first = sum(loaded[:quarter]) / quarter
            last = sum(loaded[-quarter:]) / quarter
            delta = last - first
            verdict = "flat" if abs(delta) < max(2.0, 0.02 * first) else ("growing" if delta > 0 else "shrinking")
            half = loaded[len(loaded) // 2 :]
            trend = (
                f"{first:6.1f} -> {last:6.1f} MB ({delta:+5.1f}) {verdict:<9}"
                f" second half {half[0]:6.1f} -> {half[-1]:6.1f} MB"
            )
        flag = "" if peak < limit_mb else f"  OVER {limit_mb:.0f} MB"
        lines.append(f"  {target.name:<8} {samples[0].role:<6} pid {pid:<7} peak {peak:6.1f} MB   {trend}{flag}")
    return lines


def rss_timeline(sampler: RssSampler, target: Target, points: int = 12) -> list[str]:
    loaded = [s for s in sampler.samples if s.target == target.name and s.phase.startswith(f"{target.name}#")]
    if not loaded:
        return []
    t0, t1 = loaded[0].at, loaded[-1].at
    step = max((t1 - t0) / points, SAMPLE_EVERY_S)
    pids = sorted({s.pid for s in loaded if s.role == "worker"})
    lines = ["  t (s)  " + " ".join(f"{'w' + str(pid):>9}" for pid in pids) + "   (worker RSS, MB)"]
    mark = t0
    while mark <= t1 + 1e-9:
        window = [s for s in loaded if mark <= s.at < mark + step]
        if window:
            cells = []
            for pid in pids:
                values = [s.kb for s in window if s.pid == pid]
                cells.append(f"{max(values) / 1024:>9.1f}" if values else f"{'-':>9}")
            lines.append(f"  {mark - t0:>5.0f}  " + " ".join(cells))
        mark += step
    return lines


# Issue 14's goals, per target, against the floor of the same run (others: --target-ratio).
# Issue 29's: the keyed twins, and a guarded call's pair (its rate is pairs per second).
TARGET_RATIOS = {
    "floor-authed": 0.6,
    "ingest": 0.3,
    "attempt": 0.35,
    "attempt-input": 0.35,
    "ingest-keyed": 0.34,
    "attempt-keyed": 0.36,
    "guarded-call": 0.17,
}
# Issue 29: at one connection, a guarded call's pair within this many times the floor's p50.
GUARDED_P50_RATIO = 3.5


def verdict(
    name: str, result: Figures, floor: Figures, rounds: dict[str, list[Round]], args: argparse.Namespace
) -> bool:
    """The issue's target for one target against the floor: printed, and True when met."""
    target_ratio = TARGET_RATIOS.get(name.removesuffix("-b"), args.target_ratio)  # -b: bench/run --compare
    ratio = result.rate / floor.rate
    pairs = [
        figures([mine]).rate / figures([theirs]).rate
        for mine, theirs in zip(rounds[name], rounds["floor"], strict=False)
        if figures([theirs]).rate
    ]
    print(
        f"\nratio {name}/floor: {ratio:.2f}  (per round: {', '.join(f'{p:.2f}' for p in pairs)})"
        f"   target >= {target_ratio:.2f}: {'met' if ratio >= target_ratio else 'MISSED'}"
    )
    p50_ratio = result.p50 / floor.p50
    if kind_of(name) == "guarded" and args.connections == 1:
        met = "met" if p50_ratio <= GUARDED_P50_RATIO else "MISSED"
        print(f"p50 {name}/floor: {p50_ratio:.2f}   target <= {GUARDED_P50_RATIO:g} at one connection: {met}")
    else:
        print(f"p50 {name}/floor: {p50_ratio:.2f}  ({result.p50 - floor.p50:+.2f} ms)")
    tail_ok = result.p99 <= 3 * result.p50
    print(
        f"{name} p99: {result.p99:.1f} ms   target < {args.target_p99:g} ms:"
        f" {'met' if result.p99 < args.target_p99 else 'MISSED'};  p99 <= 3 x p50 ({3 * result.p50:.1f} ms):"
        f" {'met' if tail_ok else 'MISSED'}"
    )
    print(
        f"CPU per request (app + PostgreSQL + load script): floor {floor.total_cpu_ms:.2f} ms,"
        f" {name} {result.total_cpu_ms:.2f} ms; on a CPU-bound machine that allows {name}/floor ="
        f" {floor.total_cpu_ms / result.total_cpu_ms:.2f}, whatever the neighbours do"
    )
    return ratio >= target_ratio and result.p99 < args.target_p99 and tail_ok


# --- main --------------------------------------------------------------------------------------


def analyze(database: str) -> None:
    """ANALYZE the bench database once priming has filled it, as autovacuum soon would on a server
    that runs it (PostgreSQL's default; this project's machine runs with autovacuum off). The hot
    path's statements are prepared, and PostgreSQL plans a prepared statement once per connection
    from the tables' statistics: without any, the plan of the step lookup read every step of the
    team through another index (a cost that grows with the table). The analyze invalidates the
    cached plans; each connection plans again on its next call."""
    import psycopg

    url = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432").rstrip("/")
    with psycopg.connect(f"{url}/{database}", autocommit=True) as connection:
        connection.execute("ANALYZE")
    print(f"{database}: analyzed")


async def main(args: argparse.Namespace) -> int:
    targets: list[Target] = args.target
    run_tag = uuid.uuid4().hex[:8]
    keys = dict(args.key)
    bodies = {t.name: Bodies(t, keys.get(t.name, args.api_key), run_tag) for t in targets}
    for target in targets:
        await wait_for_port(target)
        print(f"{target.name}: {target.url} answers 201 with {{{await preflight(target, bodies[target.name])}}}")
    # Enough rows before the ANALYZE that no plan is made for a table of one page: a plan made
    # then (a prepared statement's, or a foreign-key check's, which PostgreSQL caches per
    # connection) reads the table from end to end and, with no autovacuum to analyze again, keeps
    # doing so as the run grows it (seen: 31.7 million step rows read by 17,745 sequential scans
    # in a one-connection run of 3,567 ingests primed with 20).
    per_connection = max(args.prime, -(-args.prime_total // args.connections))
    for target in targets:
        started = time.perf_counter()
        await prime(target, bodies[target.name], args.connections, per_connection)
        print(
            f"{target.name}: primed with {per_connection} requests per connection"
            f" in {time.perf_counter() - started:.1f} s"
        )
    if args.database:
        analyze(args.database)
    sampler = RssSampler(targets, args.database)
    sampling = asyncio.create_task(sampler.run())
    rounds: dict[str, list[Round]] = {t.name: [] for t in targets}
    amount = f"{args.requests} requests" if args.requests else f"{args.duration:g} s"
    print(
        f"\n{args.rounds} round(s) per target, alternating; each: {args.warmup:g} s warm-up, then {amount};"
        f" {args.connections} connections; client {args.client}\n"
    )
    print("round " + HEADER)
    try:
        for number in range(1, args.rounds + 1):
            for target in targets:
                round_ = Round(target=target, number=number)
                await run_round(round_, bodies[target.name], args, sampler)
                rounds[target.name].append(round_)
                print(f"{number:>5} {row(target.name, figures([round_]))}", flush=True)
                for text in round_.error_bodies:
                    print(f"        error {text}")
                if args.pause:
                    await asyncio.sleep(args.pause)
    finally:
        sampling.cancel()

    results = {name: figures(rs) for name, rs in rounds.items()}
    print("\nSummary (all rounds of a target pooled)\n      " + HEADER)
    for name, result in results.items():
        print(f"      {row(name, result)}")
    print(f"      {CPU_NOTE}")
    verdict_ok = True
    if "floor" in results and results["floor"].rate:
        floor = results["floor"]
        for name, result in results.items():
            if name != "floor":
                verdict_ok = verdict(name, result, floor, rounds, args) and verdict_ok
        print(
            f"Little's law at {args.connections} connections: mean latency = {args.connections} / rate, so a p99"
            f" under {args.target_p99:g} ms needs well over {args.connections / (args.target_p99 / 1000):.0f} req/s"
        )
    print(f"\nRSS per process (sampled every {SAMPLE_EVERY_S:g} s). Trend: mean of the first vs the last quarter of")
    print("the samples taken while that target was measured, then the first and last sample of the second half.")
    for target in targets:
        print("\n".join(rss_report(sampler, target, args.rss_limit_mb)))
    if args.timeline:
        for target in targets:
            print(f"\nRSS over the run, {target.name}")
            print("\n".join(rss_timeline(sampler, target)))
    if args.json:
        summary = {
            name: {
                "requests": f.requests,
                "errors": dict(f.errors),
                "seconds": f.seconds,
                "rps": f.rate,
                "p50_ms": f.p50,
                "p99_ms": f.p99,
                "max_ms": f.max,
                "cpu_ms_per_request": {k: f.per_request_ms(k) for k in ("server", "postgres", "client")},
            }
            for name, f in results.items()
        }
        summary["rss"] = [s.__dict__ for s in sampler.samples]
        with open(args.json, "w") as handle:
            json.dump(summary, handle)
    errors = sum(sum(f.errors.values()) for f in results.values())
    if errors:
        print(f"\n{errors} request(s) did not answer 201", file=sys.stderr)
        return 1
    return 0 if verdict_ok or not args.strict else 2


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=parse_target, action="append", required=True, help="NAME=URL[@PID]")
    parser.add_argument("--api-key", required=True)
    parser.add_argument(
        "--key", type=parse_key, action="append", default=[], help="NAME=KEY: another team's key for one target"
    )
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds per round")
    parser.add_argument("--requests", type=int, default=0, help="measured requests per round (instead of time)")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds per round before measuring")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per target, alternating")
    parser.add_argument("--prime", type=int, default=20, help="unmeasured requests per connection, once, first")
    parser.add_argument(
        "--prime-total", type=int, default=640, help="unmeasured requests per target at least, over all connections"
    )
    parser.add_argument("--pause", type=float, default=1.0, help="seconds of rest between rounds")
    parser.add_argument("--client", choices=("raw", "httpx"), default="raw")
    parser.add_argument("--timeline", action="store_true", help="print RSS over time (soak)")
    parser.add_argument("--rss-limit-mb", type=float, default=200.0)
    parser.add_argument("--target-ratio", type=float, default=0.6)
    parser.add_argument("--target-p99", type=float, default=50.0)
    parser.add_argument("--strict", action="store_true", help="exit 2 when a target figure is missed")
    parser.add_argument("--json", help="also write the figures and RSS samples here")
    parser.add_argument("--database", default="hp_bench_ingest", help="whose PostgreSQL backends to count")
    args = parser.parse_args(argv)
    if not 1 <= args.connections <= MAX_CONNECTIONS:
        parser.error(f"--connections is 1..{MAX_CONNECTIONS}")
    if not 0 < args.duration <= MAX_DURATION_S or not 0 <= args.warmup <= 60:
        parser.error(f"--duration is (0, {MAX_DURATION_S:g}] s, --warmup [0, 60] s")
    if not 0 <= args.requests <= MAX_REQUESTS or not 1 <= args.rounds <= 20:
        parser.error(f"--requests is 0..{MAX_REQUESTS}, --rounds 1..20")
    if len({t.name for t in args.target}) != len(args.target):
        parser.error("target names must differ")
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(arguments())))
