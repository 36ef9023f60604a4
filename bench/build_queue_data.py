"""Build a PostgreSQL database with 200,000 held steps for measuring the reviewers' queue page.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/hp_bench_queue \\
        .venv/bin/python bench/build_queue_data.py [--held 200000] [--recreate]

The database is created if missing, migrated, emptied, and filled by INSERT … SELECT over
generate_series (a few seconds for 200,000 steps). Three teams with three tools each; the held
steps are spread over the queues as a busy deployment has them (40 % awaiting approval, 20 %
verifying, 15 % escalated, 25 % needs input or waiting for a retry), each with its last envelope,
a granted attempt carrying an input (the queue's one-line summary), and, for a third of the
approvals, a first reviewer's approval (the "approvals given" column). 20,000 closed steps sit
beside them; one tool (`charge_card`) is halted. The steps have no audit rows: `verify_audit`
fails on this database, which is for measuring only. The tables are analysed, as autovacuum
would have them.

Prints the reviewer (`bench-reviewer` / `bench-password`, a member of every team: the page then
reads every held step's queue) for bench/queue_page.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/hp_bench_queue")
os.environ.setdefault("SECRET_KEY", "holdpoint-bench-key-not-a-secret-padded-to-fifty-chars")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

PASSWORD = "bench-password"
REVIEWER = "bench-reviewer"
TEAMS = {
    "bench": ("create_invoice", "refund_payment", "send_email"),
    "beta": ("charge_card", "book_meeting", "post_message"),
    "gamma": ("create_ticket", "sync_inventory", "update_crm"),
}
CLOSED = 20_000

# The held steps' states by i % 20 (see the docstring's shares), with their reason and code.
STATES_SQL = """
    CASE WHEN mod(i, 20) < 8 THEN 'awaiting_approval' WHEN mod(i, 20) < 12 THEN 'verifying'
         WHEN mod(i, 20) < 15 THEN 'escalated' WHEN mod(i, 20) < 19 THEN 'needs_input' ELSE 'waiting_retry' END
"""


def _database(recreate: bool) -> None:
    import psycopg

    url = urlsplit(os.environ["DATABASE_URL"])
    name = url.path.lstrip("/")
    admin = url._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as connection:
        if recreate:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if not connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            connection.execute(f'CREATE DATABASE "{name}"')


def build(held: int) -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    from accounts.models import Membership
    from accounts.services import reviewer_create, team_create
    from envelopes.configuration import tool_configure

    started = time.monotonic()
    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE envelopes_team, auth_user RESTART IDENTITY CASCADE")
    tool_ids: list[int] = []
    team_ids: list[int] = []
    user = None
    for slug, tools in TEAMS.items():
        team = team_create(slug=slug)
        team_ids.append(team.pk)
        for name in tools:
            tool_ids.append(tool_configure(team=team, name=name, settings={}, actor="bench").pk)
        if user is None:
            user = reviewer_create(username=REVIEWER, password=PASSWORD, team=team, role="reviewer")
        else:
            Membership.objects.create(user=user, team=team, role="reviewer")
    assert user is not None
    total = held + CLOSED
    with transaction.atomic(), connection.cursor() as cursor:
        # The rows are consistent by construction: skip the per-row foreign-key triggers (superuser).
        cursor.execute("SET LOCAL session_replication_role = replica")
        # Step i: tool i % 9 (its team the tool's), created i seconds after a start 30 days ago;
        # the last CLOSED steps are succeeded.
        cursor.execute(
            f"""
            INSERT INTO envelopes_step (id, team_id, tool_id, operation_ref, state, reason, correlation_id, run_id,
                attempts, last_fingerprint, last_attempt_reported, approval_fingerprint, not_before, trusted_after,
                deadline, expires_at, due_at, state_entered_at, last_envelope_id, version, audit_seq, audit_head,
                created_at, updated_at)
            SELECT i, t.team_id, t.id, 'run_' || (i / 7) || '/step_' || i,
                CASE WHEN i > %(held)s THEN 'succeeded' ELSE {STATES_SQL} END,
                CASE WHEN i > %(held)s THEN 'succeeded' ELSE 'bench' END,
                'corr-' || i, 'run_' || (i / 7), 1, md5(i::text) || md5(i::text), false,
                CASE WHEN i <= %(held)s AND mod(i, 20) < 8 THEN md5(i::text) || md5(i::text) ELSE '' END,
                CASE WHEN mod(i, 20) = 19 THEN now() + interval '1 hour' END,
                CASE WHEN mod(i, 20) BETWEEN 8 AND 11 THEN at + interval '5 minutes' END,
                CASE WHEN mod(i, 20) BETWEEN 8 AND 11 THEN at + interval '60 days' END,
                CASE WHEN mod(i, 20) < 8 THEN at + interval '60 days' END,
                CASE WHEN i <= %(held)s AND mod(i, 20) < 12 THEN at + interval '60 days'
                     WHEN i <= %(held)s AND mod(i, 20) = 19 THEN now() + interval '1 hour' END,
                at, i, 3, 0, '', at, at
            FROM generate_series(1, %(total)s) AS i
            CROSS JOIN LATERAL (SELECT now() - interval '30 days' + i * interval '1 second' AS at) AS time
            JOIN envelopes_tool t ON t.id = (%(tools)s)[1 + mod(i, 9)]
            """,
            {"held": held, "total": total, "tools": tool_ids},
        )
        cursor.execute(
            """
            INSERT INTO envelopes_envelope (id, team_id, tool_id, step_id, dialect, ok, code, category, commit_state,
                retry_directive, next_action, scope, resource_id, safe_details, dropped_detail_keys, agent_message,
                user_message, correlation_id, run_id, occurred_at, received_at, flags, documented, step_closed,
                result_sha256)
            SELECT s.id, s.team_id, s.tool_id, s.id, 'canonical', s.state = 'succeeded',
                CASE WHEN s.state = 'succeeded' THEN '' ELSE (ARRAY['MISSING_APPROVAL', 'OUTCOME_UNKNOWN',
                    'LEDGER_UNREACHABLE', 'INVALID_FIELD', 'RATE_LIMITED'])[1 + mod(s.id, 5)] END,
                'dependency', 'not_committed', 'never', 'escalate', '', '', '{}', '[]', 'bench', '', s.correlation_id,
                s.run_id, s.state_entered_at, s.state_entered_at, '[]', true, false, ''
            FROM envelopes_step s
            """
        )
        cursor.execute(
            """
            INSERT INTO envelopes_attempt (id, step_id, number, fingerprint, run_id, correlation_id, granted_at,
                input, input_redacted)
            SELECT s.id, s.id, 1, s.last_fingerprint, s.run_id, s.correlation_id, s.created_at,
                jsonb_build_object('amount', mod(s.id, 5000), 'currency', 'EUR', 'customer', 'cus_' || s.id), false
            FROM envelopes_step s
            """
        )
        cursor.execute(
            """
            INSERT INTO approvals_decision (step_id, reviewer_id, action, reason, decided_at, input_fingerprint,
                edited)
            SELECT s.id, %s, 'approve', 'first of two', s.state_entered_at + interval '1 minute',
                s.approval_fingerprint, false
            FROM envelopes_step s WHERE s.state = 'awaiting_approval' AND mod(s.id, 3) = 0
            """,
            [user.pk],
        )
        # One halted tool (its held steps are counted on the page), as during an outage.
        cursor.execute(
            "UPDATE envelopes_tool SET halted_until = now() + interval '30 days', halted_at = now(), "
            "halted_reason = 'UPSTREAM_UNAVAILABLE' WHERE name = 'charge_card'"
        )
        for table in ("envelopes_step", "envelopes_envelope", "envelopes_attempt", "approvals_decision"):
            cursor.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT MAX(id) FROM {table}))")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
        cursor.execute("SELECT state, count(*) FROM envelopes_step GROUP BY state ORDER BY state")
        counts = cursor.fetchall()
    print(
        f"built {total:,} steps ({held:,} held) in {time.monotonic() - started:.0f} s: "
        + ", ".join(f"{state} {count:,}" for state, count in counts)
    )
    print(f"reviewer: {REVIEWER} / {PASSWORD} (a member of {', '.join(TEAMS)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--held", type=int, default=200_000)
    parser.add_argument("--recreate", action="store_true", help="drop and create the database first")
    args = parser.parse_args()
    _database(args.recreate)
    build(args.held)


if __name__ == "__main__":
    main()
