"""Build a PostgreSQL database with 1,000,000 envelopes (and their steps, attempts and audit
rows) for measuring the metrics API and the tool page.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/hp_bench \\
        .venv/bin/python bench/build_metrics_data.py [--envelopes 1000000] [--days 30] [--recreate]

The database is created if missing, migrated, emptied, and filled with COPY. The steps follow
the state machine's real paths (clean success, input fix, rate limit, unknown outcome with
verification, approval, escalation, exhausted budget), spread over the last `--days` days, so
the metrics have something true to count. One hot tool (`bench/create_invoice`) gets about half
of everything. The audit rows carry placeholder hashes: `verify_audit` fails on this database,
which is for measuring only. Finally the hourly rollups are built (`metrics_rollup`) and the
tables analysed, as a deployment with its beat task running would have them.

Prints the team, the admin user (password `bench-password`) and an API key for
bench/measure_metrics.py.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/hp_bench")
os.environ.setdefault("SECRET_KEY", "holdpoint-bench-key-not-a-secret-padded-to-fifty-chars")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

PASSWORD = "bench-password"
HASH = "0" * 64
HELD = frozenset({"needs_input", "waiting_retry", "verifying", "awaiting_approval", "escalated"})

# team -> {tool: share of the steps}
TOOLS = {
    "bench": {"create_invoice": 0.50, "send_email": 0.12, "refund_payment": 0.08, "update_crm": 0.05},
    "beta": {"create_invoice": 0.08, "book_meeting": 0.05, "post_message": 0.04},
    "gamma": {"charge_card": 0.04, "create_ticket": 0.02, "sync_inventory": 0.02},
}
CODES = {
    # code: (category, next_action, documented)
    "INVALID_FIELD": ("validation", "correct_input", True),
    "MISSING_FIELD": ("validation", "correct_input", True),
    "RATE_LIMITED": ("rate_limit", "wait_and_retry", True),
    "UPSTREAM_TIMEOUT": ("dependency", "wait_and_retry", True),
    "OUTCOME_UNKNOWN": ("dependency", "verify_operation", True),
    "MISSING_APPROVAL": ("authorization", "request_approval", True),
    "LEDGER_UNREACHABLE": ("internal", "escalate", True),
    "DUPLICATE_REFERENCE": ("conflict", "escalate", True),
    "WEIRD_UPSTREAM_419": ("dependency", "wait_and_retry", False),
    "TEMP_GLITCH": ("internal", "wait_and_retry", False),
    "FIELD_TOO_LONG": ("validation", "correct_input", False),
}
UNDOCUMENTED_SHARE = 0.04
RESOLVED = ("resolved_by_verification",)


def _database(recreate: bool) -> None:
    """Create the database named by DATABASE_URL if it does not exist (drop it first with
    `--recreate`, after a migration changed under it)."""
    import psycopg

    url = urlsplit(os.environ["DATABASE_URL"])
    name = url.path.lstrip("/")
    admin = url._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as connection:
        if recreate:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}"')
        exists = connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            connection.execute(f'CREATE DATABASE "{name}"')


@dataclass
class Rows:
    steps: list[tuple] = field(default_factory=list)
    envelopes: list[tuple] = field(default_factory=list)
    attempts: list[tuple] = field(default_factory=list)
    audit: list[tuple] = field(default_factory=list)


@dataclass
class StepBuilder:
    """Walks one step through the state machine, writing the rows it leaves behind."""

    rows: Rows
    ids: dict[str, int]
    rng: random.Random
    team_id: int
    tool_id: int
    ref: str
    start: datetime
    now: datetime
    state: str = ""
    reason: str = ""
    entered: datetime | None = None
    attempts: int = 0
    seq: int = 0
    clock: datetime | None = None
    step_id: int = 0
    reported: bool = True
    stopped: bool = False

    def __post_init__(self) -> None:
        self.ids["step"] += 1
        self.step_id = self.ids["step"]
        self.clock = self.start
        self.entered = self.start

    def wait(self, seconds: float) -> bool:
        """Advance the clock; False (and the step stops here) when that is past now."""
        assert self.clock is not None
        self.clock = self.clock + timedelta(seconds=seconds)
        if self.clock >= self.now:
            self.stopped = True
        return not self.stopped

    def _audit(self, kind: str, before: str, after: str, reason: str, held: float | None, data: dict) -> None:
        self.ids["audit"] += 1
        self.seq += 1
        self.rows.audit.append((
            self.ids["audit"], f"step:{self.step_id}", self.seq, kind, "agent", before, after, reason,
            held, json.dumps(data), self.clock, HASH, HASH, self.step_id, self.team_id, self.tool_id,
        ))

    def move(self, after: str, reason: str, *, cause: str, effects: tuple[str, ...] = ()) -> None:
        if self.stopped:
            return
        held = None
        if self.state in HELD and after != self.state:
            held = round((self.clock - self.entered).total_seconds(), 6)
        self._audit("transition", self.state, after, reason, held, {"cause": cause, "effects": list(effects)})
        if after != self.state:
            self.entered = self.clock
        self.state, self.reason = after, reason

    def refuse(self, code: str) -> None:
        if self.stopped:
            return
        prevented = code in ("verification_required", "already_committed")
        self._audit("refusal", self.state, self.state, code, None, {"duplicate_prevented": prevented})

    def attempt(self) -> None:
        if self.stopped:
            return
        self.attempts += 1
        self.reported = False
        self.ids["attempt"] += 1
        self.rows.attempts.append((self.ids["attempt"], self.attempts, HASH, "", "", self.clock, self.step_id, False))
        self.move("in_progress", "attempt_granted", cause="attempt")

    def envelope(self, code: str | None) -> None:
        """An envelope: None is a success; otherwise the error's code decides the next state."""
        if self.stopped:
            return
        self.reported = True
        self.ids["envelope"] += 1
        roll = self.rng.random()
        flags = []
        if roll < 0.005:
            flags.append("redacted")
        if 0.005 <= roll < 0.007:
            flags.append("suspicious_text")
        if code is None:
            row = (True, "", "", "committed", "", None, "")
        else:
            category, next_action, documented = CODES[code]
            if not documented:
                flags.append("undocumented_code")
            directive = {"wait_and_retry": "after_delay", "correct_input": "after_input_fix"}.get(next_action, "never")
            commit = "unknown" if next_action in ("verify_operation", "escalate") else "not_committed"
            row = (False, code, category, commit, directive, 0 if directive == "never" else 2, next_action)
        ok, code_, category, commit_state, directive, remaining, next_action = row
        self.rows.envelopes.append((
            self.ids["envelope"], "canonical", ok, code_, category, commit_state, directive, None, remaining,
            next_action, "request" if not ok else "", "", "{}", "[]", "", "", f"corr-{self.step_id}", "",
            self.attempts or None, self.clock, self.clock, None, "", None, json.dumps(sorted(flags)),
            code is None or CODES[code][2], False, self.step_id, self.team_id, self.tool_id,
        ))

    def finish(self) -> None:
        if not self.state:
            return  # it would start after now: nothing was written for it
        self.rows.steps.append((
            self.step_id, self.ref, self.state, self.reason, f"corr-{self.step_id}", "", self.attempts, HASH,
            self.reported, "", None, None, None, None, None, self.entered, self.seq + 1, self.seq,
            HASH, self.start, self.clock if not self.stopped else self.now, None, self.team_id, self.tool_id,
        ))


def _error_code(rng: random.Random, documented_code: str, undocumented: tuple[str, ...]) -> str:
    if undocumented and rng.random() < UNDOCUMENTED_SHARE:
        return rng.choice(undocumented)
    return documented_code


def walk(step: StepBuilder, rng: random.Random) -> None:
    """One of the paths a real step takes, with plausible timings."""
    kind = rng.random()
    undocumented_wait = ("WEIRD_UPSTREAM_419", "TEMP_GLITCH")

    def quick() -> float:
        return rng.uniform(0.2, 5)

    if kind < 0.55:  # clean success
        step.attempt()
        step.wait(quick())
        step.envelope(None)
        step.move("succeeded", "committed", cause="envelope")
    elif kind < 0.65:  # bad input, fixed
        step.attempt()
        step.wait(quick())
        step.envelope(_error_code(rng, rng.choice(["INVALID_FIELD", "MISSING_FIELD"]), ("FIELD_TOO_LONG",)))
        step.move("needs_input", "input_fix_required", cause="envelope")
        if step.wait(rng.lognormvariate(4.5, 1.0)):  # a minute or two, sometimes an hour
            step.attempt()
            step.wait(quick())
            step.envelope(None)
            step.move("succeeded", "committed", cause="envelope")
    elif kind < 0.75:  # rate limited, waits, retries
        step.attempt()
        step.wait(quick())
        step.envelope(_error_code(rng, rng.choice(["RATE_LIMITED", "UPSTREAM_TIMEOUT"]), undocumented_wait))
        step.move("waiting_retry", "retry_not_before", cause="envelope")
        if step.wait(rng.uniform(1, 90)):
            step.move("retry_ready", "retry_window_open", cause="timer")
            step.wait(rng.uniform(0.1, 3))
            step.attempt()
            step.wait(quick())
            step.envelope(None)
            step.move("succeeded", "committed", cause="envelope")
    elif kind < 0.83:  # unknown outcome, verified
        step.attempt()
        step.wait(quick())
        step.envelope("OUTCOME_UNKNOWN")
        step.move("verifying", "verification_required", cause="envelope")
        if rng.random() < 0.3 and step.wait(rng.uniform(1, 60)):
            step.refuse("verification_required")
        if step.wait(rng.lognormvariate(5.5, 0.8)):
            outcome = rng.random()
            if outcome < 0.7:
                step.move("succeeded", "verified_committed", cause="verification", effects=RESOLVED)
                if rng.random() < 0.2 and step.wait(rng.uniform(1, 120)):
                    step.refuse("already_committed")
            elif outcome < 0.95:
                step.move("retry_ready", "verified_not_found", cause="verification", effects=RESOLVED)
                step.wait(rng.uniform(0.5, 10))
                step.attempt()
                step.wait(quick())
                step.envelope(None)
                step.move("succeeded", "committed", cause="envelope")
            else:
                step.move("escalated", "verification_unavailable", cause="verification")
    elif kind < 0.88:  # approval
        step.wait(quick())
        step.envelope("MISSING_APPROVAL")
        step.move("awaiting_approval", "approval_pending", cause="envelope")
        decision = rng.random()
        if decision < 0.75 and step.wait(rng.lognormvariate(6, 1.0)):
            step.move("retry_ready", "approved", cause="decision")
            step.wait(rng.uniform(1, 30))
            step.attempt()
            step.wait(quick())
            step.envelope(None)
            step.move("succeeded", "committed", cause="envelope")
        elif decision < 0.9 and step.wait(rng.lognormvariate(6, 1.0)):
            step.move("cancelled", "rejected", cause="decision")
        elif step.wait(3600):
            step.move("cancelled", "approval_expired", cause="timer", effects=("approval_expired",))
    elif kind < 0.97:  # escalated by the tool, mostly resolved by a reviewer
        step.attempt()
        step.wait(quick())
        step.envelope(rng.choice(["LEDGER_UNREACHABLE", "DUPLICATE_REFERENCE"]))
        step.move("escalated", "escalation_requested", cause="envelope")
        if rng.random() < 0.9 and step.wait(rng.lognormvariate(7, 1.0)):
            step.move("succeeded", "resolved_committed", cause="decision")
    else:  # out of attempts
        step.attempt()
        step.wait(quick())
        step.envelope(_error_code(rng, "RATE_LIMITED", undocumented_wait))
        step.move("escalated", "attempt_budget_exhausted", cause="envelope", effects=("attempt_budget_exhausted",))
        if rng.random() < 0.9 and step.wait(rng.lognormvariate(7, 1.0)):
            step.move("cancelled", "cancelled_by_reviewer", cause="decision")


STEP_COLUMNS = (
    "id, operation_ref, state, reason, correlation_id, run_id, attempts, last_fingerprint, last_attempt_reported, "
    "approval_fingerprint, not_before, trusted_after, deadline, expires_at, due_at, state_entered_at, version, "
    "audit_seq, audit_head, created_at, updated_at, last_envelope_id, team_id, tool_id"
)
ENVELOPE_COLUMNS = (
    "id, dialect, ok, code, category, commit_state, retry_directive, not_before, max_attempts_remaining, "
    "next_action, scope, resource_id, safe_details, dropped_detail_keys, agent_message, user_message, "
    "correlation_id, run_id, attempt, occurred_at, received_at, verification, result_sha256, result_size, flags, "
    "documented, step_closed, step_id, team_id, tool_id"
)
ATTEMPT_COLUMNS = "id, number, fingerprint, run_id, correlation_id, granted_at, step_id, input_redacted"
AUDIT_COLUMNS = (
    "id, chain, seq, kind, actor, before, after, reason, held_seconds, data, created_at, prev_hash, hash, "
    "step_id, team_id, tool_id"
)


def _text(value: Any) -> str:
    """One value in COPY's text format (the generated strings hold no tab, newline or backslash)."""
    if value is None:
        return "\\N"
    if value is True:
        return "t"
    if value is False:
        return "f"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _copy(cursor: Any, table: str, columns: str, rows: list[tuple]) -> None:
    with cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        for start in range(0, len(rows), 50_000):
            chunk = rows[start : start + 50_000]
            copy.write("".join("\t".join(map(_text, row)) + "\n" for row in chunk))


def build(envelopes: int, days: int, seed: int) -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    from accounts.services import api_key_create, reviewer_create, team_create
    from envelopes.configuration import error_code_upsert, tool_configure
    from envelopes.models import Tool
    from metrics.services import metrics_rollup

    started = time.monotonic()
    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE envelopes_team, auth_user, metrics_metricswatermark RESTART IDENTITY CASCADE")
    teams = {slug: team_create(slug=slug) for slug in TOOLS}
    tools: list[tuple[Tool, float]] = []
    for slug, shares in TOOLS.items():
        for name, share in shares.items():
            tool = tool_configure(team=teams[slug], name=name, settings={"approval_ttl_s": 3600}, actor="bench")
            tools.append((tool, share))
            for code, (category, next_action, documented) in CODES.items():
                if documented:
                    retry = {"wait_and_retry": "transient", "correct_input": "correctable"}.get(next_action, "escalate")
                    error_code_upsert(team=teams[slug], tool_name=name, code=code,
                                      fields={"category": category, "retry_class": retry, "next_action": next_action})
    reviewer_create(username="bench-admin", password=PASSWORD, team=teams["bench"], role="admin")
    key = api_key_create(team=teams["bench"], name="bench").raw

    rng = random.Random(seed)
    now = datetime.now(UTC)
    first = now - timedelta(days=days)
    span = (now - first).total_seconds()
    weights = [share for _, share in tools]
    rows = Rows()
    ids = {"step": 0, "envelope": 0, "attempt": 0, "audit": 0}
    # Steps start in time order, as they arrive in production (ids grow with time); a few more
    # at random times if the estimate fell short.
    starts = sorted(rng.random() * span for _ in range(int(envelopes / 1.26)))
    while ids["envelope"] < envelopes:
        offset = starts[ids["step"]] if ids["step"] < len(starts) else rng.random() * span
        tool = rng.choices(tools, weights)[0][0]
        start = first + timedelta(seconds=offset)
        ref = f"run_{ids['step'] // 7}/step_{ids['step']}"
        step = StepBuilder(rows, ids, rng, tool.team_id, tool.pk, ref, start, now)
        walk(step, rng)
        step.finish()
    generated = time.monotonic()
    print(f"generated {len(rows.steps):,} steps, {len(rows.envelopes):,} envelopes, {len(rows.attempts):,} attempts, "
          f"{len(rows.audit):,} audit rows in {generated - started:.0f} s", flush=True)

    # Rows reach the disk in time order, as an append-only table fills in production.
    # After the audit rows the setup wrote (team_create, tool_configure... are audited).
    with connection.cursor() as cursor:
        cursor.execute("SELECT COALESCE(MAX(id), 0) FROM envelopes_auditevent")
        audited = cursor.fetchone()[0]
    for table, at, after in ((rows.envelopes, 20, 0), (rows.attempts, 5, 0), (rows.audit, 10, audited)):
        table.sort(key=lambda row, at=at: row[at])
        for index, row in enumerate(table):
            table[index] = (after + index + 1, *row[1:])
    with transaction.atomic(), connection.cursor() as cursor:
        raw = cursor.cursor
        # The generated rows are consistent: skip the per-row foreign-key triggers (superuser).
        cursor.execute("SET LOCAL session_replication_role = replica")
        _copy(raw, "envelopes_step", STEP_COLUMNS, rows.steps)
        _copy(raw, "envelopes_envelope", ENVELOPE_COLUMNS, rows.envelopes)
        _copy(raw, "envelopes_attempt", ATTEMPT_COLUMNS, rows.attempts)
        _copy(raw, "envelopes_auditevent", AUDIT_COLUMNS, rows.audit)
        for table in ("envelopes_step", "envelopes_envelope", "envelopes_attempt", "envelopes_auditevent"):
            cursor.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT MAX(id) FROM {table}))")
    copied = time.monotonic()
    print(f"copied in {copied - generated:.0f} s", flush=True)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    hours = metrics_rollup()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE metrics_toolhour")
    print(f"rolled up {hours} hours in {time.monotonic() - copied:.0f} s (with VACUUM ANALYZE)", flush=True)
    print(f"team: bench   hot tool: create_invoice   admin: bench-admin / {PASSWORD}")
    print(f"API key: {key}")
    (Path(__file__).resolve().parent.parent / "var" / "bench_api_key").write_text(key + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envelopes", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--recreate", action="store_true", help="drop and create the database first")
    args = parser.parse_args()
    _database(args.recreate)
    build(args.envelopes, args.days, args.seed)


if __name__ == "__main__":
    main()
