"""The parts around Holdpoint, as real processes the fault run can break: a PostgreSQL cluster and
a redis-server of the test's own, a vhost of its own on the machine's RabbitMQ, Celery workers and
beat, a webhook receiver, and the load of agents calling the API."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from tests.deploy.deployment import ROOT, free_port


def postgresql_bin() -> Path | None:
    """The newest /usr/lib/postgresql/*/bin with initdb and pg_ctl, if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parent.parent.name))
    return Path(found[-1]).parent if found else None


def _as_postgres(args: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as the `postgres` user."""
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


class PostgreSQL:
    """A cluster of its own in a temporary directory, on a free port, trusting local TCP."""

    def __init__(self) -> None:
        binaries = postgresql_bin()
        assert binaries is not None
        self.bin = binaries
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="hp-faults-pg-"))
        self.data = self.dir / "data"
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        self.log = self.dir / "postgresql.log"

    def _run(self, *args: str, timeout: float = 120) -> None:
        done = subprocess.run(_as_postgres(list(args)), capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"{args[0]} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"

    def start(self) -> None:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8")
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.dir}"
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def restart(self) -> None:
        """`pg_ctl restart -m fast`: every session is ended, and the server is back."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-m", "fast", "-w", "restart")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            subprocess.run(
                _as_postgres([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"]),
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def execute(self, database: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True) as connection:
            cursor = connection.execute(statement, params)
            return cursor.fetchall() if cursor.description else []


class Redis:
    """A redis-server of its own, on a free port, nothing saved: a restart loses everything."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = Path(tempfile.mkstemp(prefix="hp-faults-redis-", suffix=".log")[1])

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True).stdout != b"PONG\n":
            assert self.process.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "redis-server did not answer within 20 s"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)

    def url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"


@contextmanager
def rabbitmq_vhost() -> Iterator[str]:
    """A vhost of its own on the machine's RabbitMQ (never restarted), for guest; its broker URL."""
    vhost = f"hp_faults_{uuid.uuid4().hex[:10]}"
    subprocess.run(["rabbitmqctl", "-q", "add_vhost", vhost], check=True, capture_output=True, timeout=60)
    try:
        subprocess.run(
            ["rabbitmqctl", "-q", "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        yield f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    finally:
        subprocess.run(["rabbitmqctl", "-q", "delete_vhost", vhost], capture_output=True, timeout=60)


class Celery:
    """`celery -A config ARGS` in its own process group, its output in a file."""

    def __init__(self, env: dict[str, str], *args: str, name: str) -> None:
        self.env = env
        self.args = args
        self.log = ROOT / "var" / f"test-faults-{name}-{os.getpid()}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts: list[int] = []  # the log's size at each start

    def start(self) -> Celery:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.starts.append(self.log.stat().st_size if self.log.exists() else 0)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", *self.args],
            cwd=ROOT,
            env=self.env,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    def kill(self) -> None:
        """SIGKILL the whole group (the prefork children too), as a crash or the OOM killer."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def output_since_start(self, start: int) -> str:
        data = self.log.read_bytes()
        end = self.starts[start + 1] if start + 1 < len(self.starts) else len(data)
        return data[self.starts[start] : end].decode(errors="replace")


class Receiver:
    """A webhook endpoint on loopback: answers 200, and keeps every delivery's webhook-id."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    receiver.ids.append(self.headers.get("webhook-id", ""))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Call:
    op: str  # "gate" or "ingest"
    started: float  # time.monotonic() the call was due (its slot in the schedule)
    seconds: float  # from `started` to the answer: a call sent late counts its wait
    status: int  # 0: no answer (a transport error)
    retry_after: str | None = None
    code: str | None = None
    envelope_id: int | None = None
    error: str = ""
    sent: float = 0.0  # time.monotonic() it was sent


@dataclass
class Load:
    """`connections` agents, each on its own kept-alive connection to one of the web servers,
    asking the gate for a new step then posting its error envelope, on a fixed schedule.

    The load is open: each agent is due to send a gate call every 1 / `rate` seconds (the
    agents' schedules spread evenly over a period) and its envelope half a period later,
    whatever the answers take. A call's latency counts from the moment it was due, so a stall
    delays and counts every call due meanwhile (no coordinated omission: a closed loop sends
    fewer calls while the server stalls, and misses the wait of those it does not send).

    The rate is chosen by `calibrate`, without faults, on the machine the run is on: the agents
    first run in a closed loop (each sending its next call once the last is answered), which
    saturates the cores that also run both web servers, the workers, beat and PostgreSQL, and
    `rate` is then SHARE of the throughput they reached (at least MIN_RATE). At that share the
    queue in front of the web servers stays short and the latency measured is Holdpoint's
    answer; in a closed loop it is mostly the wait behind the other agents' calls, and grows
    with their number whatever Holdpoint does. A machine shared with other work sustains less,
    so the rate is measured each run, not fixed. HOLDPOINT_FAULT_RATE (gate calls a second per
    agent) fixes it.
    """

    urls: list[str]
    api_key: str
    connections: int = 8
    rate: float = 0.0  # gate calls a second per agent; 0: not chosen yet (calibrate)
    calls: list[Call] = field(default_factory=list)
    closed_loop_calls_per_s: float = 0.0  # what calibrate measured

    SHARE = 1 / 3
    # The fewest gate calls a second per agent: enough calls for what the fault run counts on
    # (over 100 of each kind, over 50 while Redis is down), on however slow a machine.
    MIN_RATE = 0.6

    def __post_init__(self) -> None:
        self._stop = threading.Event()

    def calibrate(self, seconds: float = 3.0) -> float:
        """Choose `rate` (unless HOLDPOINT_FAULT_RATE gives it): the agents in a closed loop for
        `seconds`, after a second to warm the servers up; the closed loop's calls a second."""
        self._closed_loop(1.0)
        done = self._closed_loop(seconds)
        self.closed_loop_calls_per_s = done / seconds
        fixed = os.environ.get("HOLDPOINT_FAULT_RATE")
        # Each agent's period holds two calls: its gate call and its envelope.
        share = self.SHARE * self.closed_loop_calls_per_s / (2 * self.connections)
        self.rate = float(fixed) if fixed else max(self.MIN_RATE, share)
        return self.closed_loop_calls_per_s

    def start(self) -> None:
        assert self.rate > 0, "calibrate first, or set HOLDPOINT_FAULT_RATE"
        self._stop.clear()
        # The clients first: made by the agents' threads, they delayed the schedule's first calls.
        clients = [self._client(n) for n in range(self.connections)]
        self._began = time.monotonic() + 0.1
        self._threads = [
            threading.Thread(target=self._agent, args=(n, client), daemon=True) for n, client in enumerate(clients)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def _closed_loop(self, seconds: float) -> int:
        """The agents calling back to back for `seconds`: how many calls were answered."""
        answered = [0] * self.connections
        deadline = time.monotonic() + seconds

        def agent(number: int) -> None:
            with self._client(number) as client:
                n = 0
                while time.monotonic() < deadline:
                    n += 1
                    ref = f"calibrate-{number}/{n}-{uuid.uuid4().hex[:6]}"
                    for op, path, body in self._pair(ref):
                        self._call(client, op, path, body, time.monotonic())
                        answered[number] += 1

        threads = [threading.Thread(target=agent, args=(n,), daemon=True) for n in range(self.connections)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=seconds + 60)
        return sum(answered)

    def _client(self, number: int) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.api_key}"}
        return httpx.Client(base_url=self.urls[number % len(self.urls)], headers=headers, timeout=30)

    @staticmethod
    def _pair(ref: str) -> list[tuple[str, str, dict[str, Any]]]:
        """An agent's two calls for a new step: the gate, then the step's error envelope."""
        fingerprint = uuid.uuid4().hex * 2
        return [
            ("gate", f"/api/v1/steps/{ref}/attempts", gate_body(fingerprint)),
            ("ingest", "/api/v1/envelopes", error_envelope(ref)),
        ]

    def _agent(self, number: int, client: httpx.Client) -> None:
        period = 1.0 / self.rate
        first = self._began + period * number / self.connections
        calls: list[Call] = []
        with client:
            n = 0
            while True:
                n += 1
                ref = f"load-{number}/{n}-{uuid.uuid4().hex[:6]}"
                for half, (op, path, body) in enumerate(self._pair(ref)):
                    due = first + (n - 1 + half / 2) * period
                    if self._stop.wait(max(0.0, due - time.monotonic())):
                        self.calls.extend(calls)  # one extend per thread: list.extend is atomic
                        return
                    calls.append(self._call(client, op, path, body, due))

    @staticmethod
    def _call(client: httpx.Client, op: str, path: str, body: dict[str, Any], due: float) -> Call:
        content = json.dumps(body)
        sent = time.monotonic()
        try:
            response = client.post(path, content=content, headers={"Content-Type": "application/json"})
        except httpx.TransportError as error:
            return Call(op, due, time.monotonic() - due, 0, sent=sent, error=f"{type(error).__name__}: {error}")
        call = Call(op, due, time.monotonic() - due, response.status_code, sent=sent)
        call.retry_after = response.headers.get("Retry-After")
        if response.headers.get("Content-Type", "").startswith("application/"):
            try:
                answer = response.json()
            except ValueError:
                answer = {}
            call.code = answer.get("code")
            if op == "ingest" and response.status_code == 201:
                call.envelope_id = answer["envelope_id"]
        return call


TOOL = "send_email"


def gate_body(fingerprint: str) -> dict[str, Any]:
    return {"tool": TOOL, "input_fingerprint": fingerprint}


def error_envelope(ref: str, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "ok": False,
        "tool": TOOL,
        "operation_ref": ref,
        "code": "INVALID_RECIPIENT_ADDRESS",
        "category": "validation",
        "commit_state": "not_committed",
        "retry": {"directive": "after_input_fix", "max_attempts_remaining": 1},
        "next_action": "correct_input",
        "safe_details": {"field": "recipient_email"},
    }
    body.update(overrides)
    return body


def waiting_envelope(ref: str, not_before: str) -> dict[str, Any]:
    """A step put in waiting_retry until `not_before`: its timer fires once, to retry_ready."""
    return error_envelope(
        ref,
        code="UPSTREAM_RATE_LIMITED",
        category="rate_limit",
        retry={"directive": "after_delay", "not_before": not_before, "max_attempts_remaining": 2},
        next_action="wait_and_retry",
        safe_details={},
    )


def percentile(values: list[float], share: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]
