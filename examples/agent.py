#!/usr/bin/env python
"""An agent that plays the seed scenarios against a running Holdpoint, with the Python SDK.

    python examples/agent.py --base-url http://127.0.0.1:8000 --api-key hp_...

The tools it calls talk to a fake provider inside this process (httpx.MockTransport), so
the only server needed is Holdpoint. Each scenario prints what the agent did and what
Holdpoint told it; the exit code is 0 when every directive was the one the contract promises.

Scenarios (`--scenario NAME`, default all):
  invalid_input    the provider refuses an address -> fix_input; a corrected input is granted
  rate_limit       the provider answers 429 Retry-After -> wait until not_before, then retry
  unknown_outcome  the write times out after it left -> verify; a retry is refused; the lookup
                   by operation_ref finds the invoice -> committed
  approval         a refund over the limit -> hold, with the refund itself sent for the reviewer
                   to see; prints the step page for a reviewer (with --wait-for-approval SECONDS
                   the agent waits for the decision and then runs the input the reviewer
                   approved: theirs if they edited it, e.g. a lower amount)
  outage           the provider is down (scope: service) -> the tool is halted; the next call
                   on another step is refused with tool_halted
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx
from holdpoint_sdk import (
    DecisionTimeout,
    Failure,
    Holdpoint,
    HoldpointError,
    Outcome,
    ToolError,
)

SCENARIOS = ("invalid_input", "rate_limit", "unknown_outcome", "approval", "outage")


# --- a fake provider: the downstream API the agent's tools call --------------------------------


class FakeProvider:
    """Email, contacts, invoices, refunds and payments, with the failures of the seeds."""

    def __init__(self, *, retry_after: int) -> None:
        self.retry_after = retry_after
        self.invoices: dict[str, dict[str, Any]] = {}
        self.refunds: list[dict[str, Any]] = []
        self.searches = 0
        self.http = httpx.Client(base_url="https://provider.example", transport=httpx.MockTransport(self.handle))

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        if request.url.path == "/emails":
            if "@" not in body.get("to", ""):
                return httpx.Response(422, json={"error": {"param": "recipient_email"}})
            return httpx.Response(202, json={"email_id": "em_1"})
        if request.url.path == "/contacts/search":
            self.searches += 1
            if self.searches == 1:
                return httpx.Response(429, headers={"Retry-After": str(self.retry_after)})
            return httpx.Response(200, json={"contacts": [{"id": "ct_1"}]})
        if request.url.path == "/invoices" and request.method == "POST":
            # The invoice is created... and the answer never arrives.
            self.invoices[request.headers["Idempotency-Key"]] = {"id": "inv_1", **body}
            raise httpx.ReadTimeout("the provider did not answer in time", request=request)
        if request.url.path == "/invoices" and request.method == "GET":
            found = self.invoices.get(request.url.params["operation_ref"])
            return httpx.Response(200, json={"invoices": [found] if found else []})
        if request.url.path == "/refunds":
            self.refunds.append(body)
            return httpx.Response(201, json={"refund_id": f"re_{len(self.refunds)}"})
        if request.url.path == "/charges":
            return httpx.Response(503, headers={"Retry-After": "60"})
        return httpx.Response(404)

    # The agent's tools. They return the provider's response; the guard reads its status.

    def send_email(self, message: dict[str, Any]) -> httpx.Response:
        return self.http.post("/emails", json=message)

    def search_contacts(self, query: dict[str, Any]) -> httpx.Response:
        return self.http.post("/contacts/search", json=query)

    def create_invoice(self, invoice: dict[str, Any], *, operation_ref: str) -> httpx.Response:
        # The operation_ref doubles as the provider's idempotency key: that is what makes
        # the write verifiable later.
        return self.http.post("/invoices", json=invoice, headers={"Idempotency-Key": operation_ref})

    def find_invoice(self, operation_ref: str) -> dict[str, Any] | None:
        found = self.http.get("/invoices", params={"operation_ref": operation_ref}).json()
        return found["invoices"][0] if found["invoices"] else None

    def refund(self, refund: dict[str, Any], *, limit: int = 500, approved: bool = False) -> httpx.Response:
        if refund["amount"] > limit and not approved:
            raise ToolError(
                Failure.approval_required(
                    "REFUND_ABOVE_LIMIT",
                    safe_details={"limit": limit},
                    user_message="A reviewer must approve refunds above the limit.",
                )
            )
        return self.http.post("/refunds", json=refund)

    def charge(self, charge: dict[str, Any]) -> httpx.Response:
        return self.http.post("/charges", json=charge)


def outage(error: BaseException) -> Failure | None:
    """This provider's 503 means the whole service is down: halt the tool (scope: service)."""
    if isinstance(error, httpx.HTTPStatusError) and error.response.status_code == 503:
        wait = int(error.response.headers.get("Retry-After", "60"))
        until = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=wait)
        return Failure.service_outage("PAYMENTS_PROVIDER_DOWN", not_before=until)
    return None


# --- the agent ---------------------------------------------------------------------------------


class Agent:
    def __init__(self, hp: Holdpoint, provider: FakeProvider, *, run_id: str, wait_for_approval: float) -> None:
        self.hp = hp
        self.provider = provider
        self.run_id = run_id
        self.wait_for_approval = wait_for_approval
        self.surprises: list[str] = []

    def ref(self, name: str) -> str:
        return f"{self.run_id}/{name}"

    def call(self, tool: str, ref: str, payload: dict[str, Any], fn: Callable[[], Any], **options: Any) -> Outcome:
        outcome = self.hp.guarded_call(
            tool=tool, operation_ref=ref, input=payload, call=fn, run_id=self.run_id, **options
        )
        if outcome.refused:
            assert outcome.refusal is not None
            what = f"refused ({outcome.refusal.code})"
        elif outcome.ok:
            what = "committed"
        else:
            assert outcome.failure is not None
            what = f"failed {outcome.failure.code}"
        when = f" not before {outcome.directive['not_before']}" if outcome.directive["not_before"] else ""
        print(f"  {tool}: {what} -> {outcome.action} ({outcome.directive['reason']}){when}")
        return outcome

    def expect(self, outcome: Outcome, action: str) -> None:
        if outcome.action != action:
            self.surprises.append(f"{outcome.operation_ref}: expected {action}, got {outcome.action}")

    # --- the scenarios ---------------------------------------------------------------------

    def invalid_input(self) -> None:
        ref = self.ref("send_email")
        message = {"to": "ada.example.com", "subject": "Your invoice"}
        first = self.call("send_email", ref, message, lambda: self.provider.send_email(message))
        self.expect(first, "fix_input")
        field = first.failure.safe_details.get("field") if first.failure else None
        print(f"  the agent corrects {field!r} and retries the same operation_ref")
        fixed = {**message, "to": "ada@example.com"}
        self.expect(self.call("send_email", ref, fixed, lambda: self.provider.send_email(fixed)), "stop")

    def rate_limit(self) -> None:
        ref = self.ref("search_contacts")
        query = {"q": "ada"}
        first = self.call(
            "search_contacts", ref, query, lambda: self.provider.search_contacts(query), side_effects=False
        )
        self.expect(first, "wait")
        print(f"  the agent sleeps until {first.directive['not_before']}")
        self.hp.sleep_until(first.not_before)
        second = self.call(
            "search_contacts", ref, query, lambda: self.provider.search_contacts(query), side_effects=False
        )
        self.expect(second, "stop")

    def unknown_outcome(self) -> None:
        ref = self.ref("create_invoice")
        invoice = {"customer": "cus_1", "amount": 1250, "currency": "EUR"}
        first = self.call(
            "create_invoice", ref, invoice,
            lambda: self.provider.create_invoice(invoice, operation_ref=ref),
            verification_tool="find_invoice",
        )  # fmt: skip
        self.expect(first, "verify")
        again = self.call(
            "create_invoice", ref, invoice, lambda: self.provider.create_invoice(invoice, operation_ref=ref)
        )
        self.expect(again, "verify")  # the gate refuses a second write: no duplicate invoice
        found = self.provider.find_invoice(ref)
        print(f"  lookup by operation_ref: {'found ' + found['id'] if found else 'nothing'}")
        answer = self.hp.report_verification(
            ref, outcome="committed" if found else "not_found", evidence_ref=found["id"] if found else None
        )
        print(f"  verification reported -> {answer['directive']['action']} ({answer['directive']['reason']})")
        if answer["directive"]["action"] != "stop":
            self.surprises.append(f"{ref}: expected stop after verification")

    def approval(self) -> None:
        ref = self.ref("issue_refund")
        refund = {"order": "ord_7", "amount": 900, "currency": "EUR"}
        # The guard sends the refund with the attempt: the reviewer sees the amount and the order.
        first = self.call("issue_refund", ref, refund, lambda: self.provider.refund(refund))
        self.expect(first, "hold")
        print(f"  a reviewer decides at {first.step_url}")
        print(f"  (or: holdpoint approve TEAM {ref} --reason ... [--input edited.json])")
        if not self.wait_for_approval:
            return
        print(f"  waiting up to {self.wait_for_approval:.0f}s for the decision ...")
        try:
            step = self.hp.wait_for_decision(ref, timeout=self.wait_for_approval, max_interval=5)
        except DecisionTimeout:
            print("  no decision yet; the step stays held")
            return
        print(f"  decided -> {step['directive']['action']} ({step['directive']['reason']})")
        if step["directive"]["action"] != "proceed":
            return
        # The approval covers one input: the agent's own, or the reviewer's edit of it. The guard
        # knows which from the decision it just read, and hands the approved one to the call.
        with self.hp.guard(tool="issue_refund", operation_ref=ref, input=refund, run_id=self.run_id) as guard:
            if guard.input_edited:
                print(f"  the reviewer edited the input: {json.dumps(guard.input, sort_keys=True)}")
            outcome = guard.call(self.provider.refund, refund, approved=True)
        whose = "the reviewer's edit" if outcome.input_edited else "as proposed"
        print(f"  issue_refund: ran {json.dumps(outcome.input, sort_keys=True)} ({whose}) -> {outcome.action}")
        self.expect(outcome, "stop")

    def outage(self) -> None:
        charge = {"customer": "cus_1", "amount": 300}
        first = self.call(
            "charge_card", self.ref("charge_1"), charge, lambda: self.provider.charge(charge), classify=outage
        )
        if first.refused and first.refusal and first.refusal.code == "tool_halted":
            print("  charge_card is still halted by an earlier run's outage; nothing was charged")
            return
        self.expect(first, "wait")
        print("  the tool is halted: another step of it is refused without calling the provider")
        other = {"customer": "cus_2", "amount": 40}
        second = self.call(
            "charge_card", self.ref("charge_2"), other, lambda: self.provider.charge(other), classify=outage
        )
        if not (second.refused and second.refusal and second.refusal.code == "tool_halted"):
            self.surprises.append("charge_2: expected a tool_halted refusal")
        elif second.refusal.retry_after:
            print(f"  Retry-After: {second.refusal.retry_after:.0f}s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default=os.environ.get("HOLDPOINT_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--api-key", default=os.environ.get("HOLDPOINT_API_KEY"))
    parser.add_argument("--scenario", choices=(*SCENARIOS, "all"), default="all")
    parser.add_argument("--run-id", default=f"demo-{time.strftime('%Y%m%d-%H%M%S')}")
    parser.add_argument(
        "--wait-for-approval", type=float, default=0, metavar="SECONDS",
        help="wait this long for a reviewer's decision in the approval scenario (default: don't)",
    )  # fmt: skip
    parser.add_argument(
        "--retry-after", type=int, default=3, metavar="SECONDS",
        help="the provider's Retry-After in the rate-limit scenario",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if not args.api_key:
        parser.error("an API key is needed: --api-key hp_... (or HOLDPOINT_API_KEY)")

    provider = FakeProvider(retry_after=args.retry_after)
    with Holdpoint(args.base_url, args.api_key) as hp:
        agent = Agent(hp, provider, run_id=args.run_id, wait_for_approval=args.wait_for_approval)
        print(f"run {args.run_id} against {hp.base_url}")
        for name in SCENARIOS if args.scenario == "all" else (args.scenario,):
            print(f"\n{name.replace('_', ' ')}")
            try:
                getattr(agent, name)()
            except HoldpointError as error:
                agent.surprises.append(f"{name}: {error!r}")
                print(f"  Holdpoint answered an error: {error!r}")
    if agent.surprises:
        print("\nunexpected:\n  " + "\n  ".join(agent.surprises))
        return 1
    print("\nevery directive was the one the contract promises")
    return 0


if __name__ == "__main__":
    sys.exit(main())
