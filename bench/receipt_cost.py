"""What signing a receipt adds to a decision (issue 27 point 5: at most 0.2 ms).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/hp_h27receipts \\
        .venv/bin/python bench/receipt_cost.py [--signatures 5000] [--decisions 300] [--rounds 4]

Two figures, in-process:
1. `envelopes.receipts.decision_sign` alone (the claims and the EdDSA signature, the key read
   from the process's cache), median of `--signatures` calls;
2. whole decisions (`approvals.services.step_decide`, as bench/decision_cost.py makes them),
   in rounds that alternate between the real path and one with `decision_sign` replaced by a
   function that signs nothing (the same statements, a link without a receipt): the difference
   of the medians is what the receipt costs a decision, its larger audit link included (wall
   time, and this process's CPU, which a loaded machine disturbs less).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--signatures", type=int, default=5000)
    parser.add_argument("--decisions", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DEBUG", "false")
    os.environ.setdefault("HOLDPOINT_HTTPS", "false")
    os.environ.setdefault("SECRET_KEY", "bench-receipt-key-not-a-secret-padded-to-fifty-characters")
    os.environ.setdefault("HOLDPOINT_WEBHOOK_ALLOW_PRIVATE", "true")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from accounts.services import reviewer_create, team_create
    from approvals.services import step_decide
    from envelopes import services
    from envelopes.configuration import tool_configure
    from envelopes.models import Decision, Step
    from envelopes.receipts import decision_sign
    from envelopes.services import steps as steps_module
    from tests.conftest import error_envelope
    from webhooks.services import endpoint_create

    slug = f"bench-receipt-{uuid.uuid4().hex[:8]}"
    team = team_create(slug=slug)
    tool_configure(team=team, name="send_email", settings={"required_approvals": 1}, actor="bench")
    endpoint_create(team=team, url="http://127.0.0.1:9/hook")
    reviewer = reviewer_create(username=f"{slug}-rita", password="bench-password-1", team=team, role="reviewer")
    ask = error_envelope(
        retry={"directive": "never", "max_attempts_remaining": 0},
        next_action="request_approval",
        code="AMOUNT_OVER_LIMIT",
        category="authorization",
    )

    def held(count: int) -> list[int]:
        ids = []
        for _ in range(count):
            ref = f"bench/receipt/{uuid.uuid4().hex}"
            payload = {**ask, "operation_ref": ref}
            services.envelope_ingest(team=team, payload=payload, dialect="canonical", raw_body=b"")
            ids.append(Step.objects.get(team=team, operation_ref=ref).pk)
        return ids

    # 1. The signature alone.
    step = Step.objects.select_related("tool", "team").get(pk=held(1)[0])
    decision = Decision(step=step, reviewer=reviewer, action="approve", input_fingerprint="ab" * 32)
    decision_sign(step=step, decision=decision, actor="rita")  # the key read once
    times = []
    cpu_started = time.process_time()
    for _ in range(args.signatures):
        started = time.perf_counter()
        decision_sign(step=step, decision=decision, actor="rita")
        times.append(1000 * (time.perf_counter() - started))
    cpu_each = 1e6 * (time.process_time() - cpu_started) / args.signatures
    times.sort()
    print(f"decision_sign alone: p50 {statistics.median(times) * 1000:.0f} µs wall, "
          f"p90 {times[int(0.9 * len(times))] * 1000:.0f} µs, {cpu_each:.0f} µs CPU each "
          f"({args.signatures} calls)")  # fmt: skip

    # 2. Whole decisions, signed and unsigned rounds alternating.
    def unsigned(*, step: Step, decision: Decision, actor: str) -> str:
        return ""

    for step_id in held(20):  # warm-up
        step_decide(team=team, step_id=step_id, actor=reviewer, action="approve", reason="ok")
    medians: dict[str, list[float]] = {"signed": [], "unsigned": []}
    cpu_medians: dict[str, list[float]] = {"signed": [], "unsigned": []}
    print(f"{'round':>5} {'path':>9} {'p50 ms':>7} {'p90 ms':>7} {'p50 CPU ms':>10}")
    for number in range(1, 2 * args.rounds + 1):
        path = "signed" if number % 2 else "unsigned"
        steps_module.decision_sign = decision_sign if path == "signed" else unsigned  # type: ignore[assignment]
        ids = held(args.decisions)
        times, cpu = [], []
        for step_id in ids:
            started, started_cpu = time.perf_counter(), time.process_time()
            step_decide(team=team, step_id=step_id, actor=reviewer, action="approve", reason="ok")
            times.append(1000 * (time.perf_counter() - started))
            cpu.append(1000 * (time.process_time() - started_cpu))
        times.sort()
        medians[path].append(statistics.median(times))
        cpu_medians[path].append(statistics.median(cpu))
        print(f"{number:>5} {path:>9} {statistics.median(times):>7.3f} {times[int(0.9 * len(times))]:>7.3f} "
              f"{statistics.median(cpu):>10.3f}")  # fmt: skip
    steps_module.decision_sign = decision_sign  # type: ignore[assignment]
    signed, plain = statistics.median(medians["signed"]), statistics.median(medians["unsigned"])
    print(f"median of the rounds' p50 wall: signed {signed:.3f} ms, unsigned {plain:.3f} ms, "
          f"the receipt adds {signed - plain:+.3f} ms")  # fmt: skip
    signed, plain = statistics.median(cpu_medians["signed"]), statistics.median(cpu_medians["unsigned"])
    print(f"median of the rounds' p50 CPU of this process: signed {signed:.3f} ms, unsigned {plain:.3f} ms, "
          f"the receipt adds {signed - plain:+.3f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
