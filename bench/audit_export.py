"""The audit export at 1,000,000 links (issue 27 point 3): peak RSS and time of
`manage.py exportaudit` (the reviewer API streams the same generator), and of the SDK's
offline `holdpoint audit verify` on its output.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/hp_h27receipts \\
        .venv/bin/python bench/audit_export.py [--links 1000000] [--chain 20] [--build]

`--build` migrates the database and replaces the team `bench-audit` with `--links` links in
chains of `--chain` links (one step each), hashed exactly as the core hashes them, written by
COPY, and sealed every 1,000 chains; so the export verifies. Each measurement runs in a fresh
process, whose peak RSS is read from wait4(2).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("SECRET_KEY", "holdpoint-bench-key-not-a-secret-padded-to-fifty-chars")
os.environ.setdefault("DEBUG", "false")
os.environ.setdefault("HOLDPOINT_HTTPS", "false")
TEAM = "bench-audit"
GENESIS = "0" * 64
AUDIT_COLUMNS = (
    "chain, seq, kind, actor, before, after, reason, held_seconds, data, created_at, prev_hash, hash, "
    "step_id, team_id, tool_id"
)


def build(links: int, chain: int) -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    from accounts.models import Team
    from accounts.services import team_create
    from bench.bulk import steps_bulk
    from envelopes.audit import _event_fields, _link_hash, _seal_hash
    from envelopes.models import AuditEvent, AuditSeal, Tool

    started = time.monotonic()
    call_command("migrate", verbosity=0)
    Team.objects.filter(slug=TEAM).delete()
    team = team_create(slug=TEAM)
    tool = Tool.objects.create(team=team, name="refund_payment")
    steps_count = links // chain
    now = datetime.now(UTC) - timedelta(days=30)
    refs = (f"run_{n // 10}/refund_{n}" for n in range(steps_count))
    steps = steps_bulk(team=team, tool=tool, refs=refs, state="succeeded", reason="committed", at=now, audit_seq=chain)
    heads: dict[str, list] = {}
    seal_prev, seal_seq, written = GENESIS, 0, 0
    seals: list[AuditSeal] = []
    clock = now
    states = ["in_progress", "awaiting_approval", "retry_ready", "in_progress"]
    # Generated while COPY writes them: the million rows are never all in memory.
    with transaction.atomic(), connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY envelopes_auditevent ({AUDIT_COLUMNS}) FROM STDIN") as copy:
            chunk: list[str] = []
            for index, step in enumerate(steps):
                prev = GENESIS
                for seq in range(1, chain + 1):
                    clock += timedelta(milliseconds=3)
                    kind = "decision" if seq % 5 == 3 else "transition"
                    event = AuditEvent(
                        team_id=team.pk, chain=f"step:{step.pk}", seq=seq, step_id=step.pk, tool_id=tool.pk,
                        kind=kind, actor="rita" if kind == "decision" else "agent", before=states[seq % 4],
                        after=states[(seq + 1) % 4], reason="approve" if kind == "decision" else "attempt_granted",
                        held_seconds=None,
                        data={"cause": "attempt", "effects": [], "attempt": seq} if kind == "transition"
                        else {"reason": "", "input_fingerprint": "ab" * 32, "edited": False},
                        created_at=clock, prev_hash=prev,
                    )  # fmt: skip
                    event.hash = _link_hash(prev, _event_fields(event))
                    chunk.append(
                        "\t".join([event.chain, str(seq), kind, event.actor, event.before, event.after, event.reason,
                                   "\\N", json.dumps(event.data), clock.isoformat(), prev, event.hash, str(step.pk),
                                   str(team.pk), str(tool.pk)])
                    )  # fmt: skip
                    prev = event.hash
                    written += 1
                if len(chunk) >= 20_000:
                    copy.write("".join(row + "\n" for row in chunk))
                    chunk = []
                heads[f"step:{step.pk}"] = [chain, prev]
                if len(heads) == 1000 or index == len(steps) - 1:
                    seal_seq += 1
                    seal = AuditSeal(team=team, seq=seal_seq, heads=heads, through_event_id=0, created_at=clock,
                                     prev_hash=seal_prev)  # fmt: skip
                    seal.hash = _seal_hash(seal)
                    seals.append(seal)
                    seal_prev, heads = seal.hash, {}
            copy.write("".join(row + "\n" for row in chunk))
        AuditSeal.objects.bulk_create(seals)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE envelopes_auditevent")
    print(f"built {written:,} links in {len(steps):,} chains, {len(seals)} seals in "
          f"{time.monotonic() - started:.0f} s", flush=True)  # fmt: skip


def measured(command: list[str], out: Path) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MB) of one fresh process writing its stdout to
    `out` (CPU: user + system, what a loaded machine does not change)."""
    with out.open("wb") as sink:
        started = time.monotonic()
        process = subprocess.Popen(command, cwd=ROOT, stdout=sink)
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.monotonic() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{command[1:3]} exited {process.returncode}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--links", type=int, default=1_000_000)
    parser.add_argument("--chain", type=int, default=20)
    parser.add_argument("--build", action="store_true")
    parser.add_argument("--out", default="/tmp/holdpoint-audit-export.jsonl")
    args = parser.parse_args()
    if args.build:
        build(args.links, args.chain)
    out = Path(args.out)
    seconds, cpu, rss = measured([sys.executable, "manage.py", "exportaudit", TEAM], out)
    size = out.stat().st_size
    lines = sum(1 for _ in out.open("rb"))
    print(f"exportaudit: {lines:,} lines, {size / 1e6:.0f} MB in {seconds:.1f} s wall, {cpu:.1f} s CPU "
          f"({lines / cpu:,.0f} lines per CPU second), peak RSS {rss:.0f} MB", flush=True)  # fmt: skip
    verify = [sys.executable, "-c", "import sys; from holdpoint_sdk.reviewer_cli import main; sys.exit(main())",
              "audit", "verify", str(out)]  # fmt: skip
    seconds, cpu, rss = measured(verify, Path("/tmp/holdpoint-audit-verify.txt"))
    print(f"holdpoint audit verify: {seconds:.1f} s wall, {cpu:.1f} s CPU, peak RSS {rss:.0f} MB: "
          f"{Path('/tmp/holdpoint-audit-verify.txt').read_text().strip()}")  # fmt: skip


if __name__ == "__main__":
    main()
