#!/usr/bin/env python3
"""A rule holds a refund before the tool runs, a reviewer approves it with a one-hour grant
for that customer, and the customer's next two refunds go through with no human (contract §11).

    .venv/bin/python examples/rules_refund.py --base-url http://127.0.0.1:8000 \\
        --api-key <the key scripts/run printed> --wait-for-approval 600

Against `scripts/run`, the demo team has the rule `refunds-over-500` (refunds above 500.00
hold for a reviewer). The agent asks the gate with each refund's input, so:

1. a refund of 800.00 for cus_42 is refused with `approval_required` before anything runs: the
   step waits in the approvals queue, and the script prints which rule held it and where to
   decide. A reviewer opens the step page's "Approve and allow similar", narrows the condition
   to the customer (`input.customer == "cus_42"`), one hour, and approves; or, from a terminal:
       holdpoint approve demo REF --grant-scope team --grant-expires-in 3600 \\
           --grant-when 'input.customer == "cus_42"'
2. the agent runs the approved refund;
3. two more refunds for cus_42 (650.00 and 720.00) are granted at once by the grant: no step
   waits, no reviewer is asked; the script prints the grant each used.
4. a refund of 900.00 for another customer is held again: the grant covers cus_42 only.

Exit 0 when every step went as described; 1 otherwise (each surprise is printed).
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from typing import Any

from holdpoint_sdk import DecisionTimeout, Holdpoint, Outcome

TOOL = "refund"
CUSTOMER = "cus_42"


def refund_provider(refund: dict[str, Any]) -> dict[str, Any]:
    """The payment provider's refund: here it always succeeds (the point is who may call it)."""
    return {"refund_id": f"re_{uuid.uuid4().hex[:8]}", "amount_cents": refund["amount_cents"]}


def explained(outcome: Outcome) -> str:
    """Which rule or grant acted, as the step says (§4 `policy`)."""
    policy = (outcome.step or {}).get("policy") or {}
    rule, grant = policy.get("rule"), policy.get("grant")
    if rule:
        return f"rule {rule.get('name')} v{rule.get('version')} (when {rule.get('when')})"
    if grant:
        return f"grant {grant.get('id')} made by {grant.get('created_by')}, {grant.get('uses_left')} uses left"
    return "no rule or grant"


class Scenario:
    def __init__(self, hp: Holdpoint, *, run_id: str, wait_for_approval: float) -> None:
        self.hp, self.run_id, self.wait_for_approval = hp, run_id, wait_for_approval
        self.surprises: list[str] = []

    def refund(self, name: str, customer: str, amount_cents: int) -> Outcome:
        refund = {"customer": customer, "amount_cents": amount_cents, "currency": "EUR"}
        return self.hp.guarded_call(
            tool=TOOL, operation_ref=f"{self.run_id}/{name}", input=refund, run_id=self.run_id, call=refund_provider
        )

    def expect(self, what: str, outcome: Outcome, action: str) -> None:
        print(f"  {what}: {outcome.action} ({outcome.directive['reason']}) by {explained(outcome)}")
        if outcome.action != action:
            self.surprises.append(f"{what}: expected {action}, got {outcome.action} ({outcome.directive['reason']})")

    def play(self) -> int:
        print(f"1. a refund of 800.00 for {CUSTOMER}: the rule holds it before the tool runs")
        first = self.refund("refund_1", CUSTOMER, 80000)
        self.expect("refund_1", first, "hold")
        if first.action != "hold":
            return self.report()
        ref = first.operation_ref
        print(f"  a reviewer decides at {first.step_url}#approve-similar")
        print(
            f"  (or: holdpoint approve <team> {ref} --grant-scope team --grant-expires-in 3600 "
            f"--grant-when 'input.customer == \"{CUSTOMER}\"')"
        )
        if not self.wait_for_approval:
            print("  not waiting (--wait-for-approval SECONDS to wait for the decision)")
            return self.report()
        try:
            step = self.hp.wait_for_decision(ref, timeout=self.wait_for_approval, max_interval=2)
        except DecisionTimeout:
            self.surprises.append("refund_1: no decision in time")
            return self.report()
        if step["directive"]["action"] != "proceed":
            self.surprises.append(f"refund_1: decided {step['directive']['reason']}, not approved")
            return self.report()

        print("2. the agent runs the refund the reviewer approved")
        ran = self.hp.guarded_call(
            tool=TOOL, operation_ref=ref, input=first.input, run_id=self.run_id, call=refund_provider
        )
        self.expect("refund_1", ran, "stop")

        print(f"3. two more refunds for {CUSTOMER}: the grant lets them through, no human asked")
        for name, amount in (("refund_2", 65000), ("refund_3", 72000)):
            outcome = self.refund(name, CUSTOMER, amount)
            self.expect(name, outcome, "stop")

        print("4. a refund for another customer: held again, the grant covers cus_42 only")
        other = self.refund("refund_4", "cus_7", 90000)
        self.expect("refund_4", other, "hold")
        return self.report()

    def report(self) -> int:
        if self.surprises:
            print("surprises:\n  " + "\n  ".join(self.surprises))
            return 1
        print("every step went as the rule and the grant say")
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default=os.environ.get("HOLDPOINT_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--api-key", default=os.environ.get("HOLDPOINT_API_KEY"), required=False)
    parser.add_argument("--run-id", default=f"rules-{uuid.uuid4().hex[:6]}")
    parser.add_argument(
        "--wait-for-approval", type=float, default=0, metavar="SECONDS", help="wait this long for the reviewer"
    )
    args = parser.parse_args(argv)
    if not args.api_key:
        parser.error("--api-key (or HOLDPOINT_API_KEY): the key scripts/run printed")
    with Holdpoint(args.base_url, args.api_key, timeout=10) as hp:
        return Scenario(hp, run_id=args.run_id, wait_for_approval=args.wait_for_approval).play()


if __name__ == "__main__":
    sys.exit(main())
