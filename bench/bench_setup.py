"""The teams bench/run measures, made through the services the commands use; prints one
`NAME KEY` line per team for bench/run to read.

- `bench`: the team of the ingest and attempt targets, with one webhook endpoint (issue 14:
  "one webhook endpoint registered so the outbox is written"; nothing listens there and no
  worker runs, so the outbox rows wait; the endpoint only makes the ingest write them);
- `bench-none` and `bench-three` (issue 12): no channel, and an email, a Slack and a webhook
  channel; the held-* targets ingest an approval request for them, the worst case for
  notifications (every request writes a notice per channel).
- `bench-rules` (issue 25): 50 enabled rules naming `send_email` (a third each deny,
  require_approval and allow; every seventh in shadow; every fifth names "*") and one live grant
  of it, none of which matches the attempt-rules target's input: every call evaluates the deny
  and require_approval rules and the grant (allow rules do not act at the gate) and is granted.

Run with HOLDPOINT_WEBHOOK_ALLOW_PRIVATE=true (the endpoints are on 127.0.0.1).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django

django.setup()

from accounts.services import api_key_create, team_create  # noqa: E402 (after django.setup())
from notifications.services import channel_create  # noqa: E402 (after django.setup())
from policy.services import grant_create, rules_replace  # noqa: E402 (after django.setup())
from webhooks.services import endpoint_create  # noqa: E402 (after django.setup())

SINK = "http://127.0.0.1:9"  # the discard port: nothing answers, nothing is sent during the run


def fifty_rules() -> list[dict[str, object]]:
    """Rules over the attempt-input body (bench/load.py's ATTEMPT_INPUT) that never match it."""
    whens = [
        "has(input.amount_cents) && input.amount_cents > 5000{n}",
        'input.to.endsWith("@blocked-{n}.example")',
        'input.options.priority == "urgent-{n}" || tool == "drop_table_{n}"',
    ]
    effects = ["deny", "require_approval", "allow"]
    return [
        {
            "name": f"rule-{n}",
            "tools": ["*"] if n % 5 == 0 else ["send_email", "charge_card"],
            "when": whens[n % 3].format(n=n),
            "effect": effects[(n // 3) % 3],
            "mode": "shadow" if n % 7 == 0 else "enforce",
        }
        for n in range(50)
    ]


def main() -> None:
    # bench/run --keep-db: the teams beside a filled database's own (whose team is named bench).
    prefix = os.environ.get("BENCH_TEAM_PREFIX", "")
    bench = team_create(slug=f"{prefix}bench", name="Benchmark")
    endpoint_create(team=bench, url=f"{SINK}/hook")
    none = team_create(slug=f"{prefix}bench-none", name="Benchmark, no channels")
    three = team_create(slug=f"{prefix}bench-three", name="Benchmark, three channels")
    channel_create(team=three, kind="email", target="ops@example.com")
    channel_create(team=three, kind="slack", target=f"{SINK}/services/T/B/X")
    channel_create(team=three, kind="webhook", target=f"{SINK}/channel")
    rules = team_create(slug=f"{prefix}bench-rules", name="Benchmark, 50 rules and a grant")
    rules_replace(team=rules, rules=fifty_rules(), actor="bench", if_version=0)
    grant_create(
        team=rules,
        tool="send_email",
        when='has(input.to) && input.to == "vip@example.com"',
        scope="team",
        scope_value="",
        expires_in_s=7 * 24 * 3600,
        max_uses=1000,
        actor="bench",
    )
    for team in (bench, none, three, rules):
        print(team.slug.removeprefix(prefix), api_key_create(team=team, name="bench").raw)


if __name__ == "__main__":
    main()
