"""wait_for_decision: conditional polling with backoff until the hold ends."""

from __future__ import annotations

import datetime as dt

import httpx
import pytest
from holdpoint_sdk import DecisionTimeout, Holdpoint, NotFound

from .conftest import BASE, KEY, FakeApi, problem, step

HELD = step("awaiting_approval", "hold", reason="approval_pending")
APPROVED = step("retry_ready", "proceed", reason="approved")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def client(api: FakeApi, clock: FakeClock) -> Holdpoint:
    return Holdpoint(BASE, KEY, transport=httpx.MockTransport(api), sleep=clock.sleep, clock=clock)


def ok(body: dict, etag: str) -> httpx.Response:
    return httpx.Response(200, json=body, headers={"ETag": etag})


def not_modified(etag: str) -> httpx.Response:
    return httpx.Response(304, headers={"ETag": etag})


def test_it_polls_with_if_none_match_and_backs_off_until_the_decision(api: FakeApi) -> None:
    clock = FakeClock()
    api.script("step", ok(HELD, '"1.1"'), *[not_modified('"1.1"')] * 5, ok(APPROVED, '"1.2"'))
    decided = client(api, clock).wait_for_decision("r", initial_interval=1, max_interval=8)
    assert decided["directive"]["action"] == "proceed"
    reads = api.of("step")
    assert len(reads) == 7
    assert "If-None-Match" not in reads[0].headers
    assert all(r.headers["If-None-Match"] == '"1.1"' for r in reads[1:])
    expected = [1, 2, 4, 8, 8, 8]
    assert len(clock.sleeps) == len(expected)
    for slept, base in zip(clock.sleeps, expected, strict=True):
        assert base * 0.9 <= slept <= base * 1.1


def test_it_returns_at_once_when_nothing_is_held(api: FakeApi) -> None:
    clock = FakeClock()
    api.script("step", ok(step("needs_input", "fix_input"), '"1.1"'))
    assert client(api, clock).wait_for_decision("r")["state"] == "needs_input"
    assert clock.sleeps == []


def test_a_wait_ends_at_its_not_before_without_oversleeping(api: FakeApi) -> None:
    clock = FakeClock()
    soon = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=0.3)).isoformat()
    waiting = step("waiting_retry", "wait", not_before=soon)
    api.script("step", ok(waiting, '"1.1"'), *[not_modified('"1.1"')] * 50)
    hp = Holdpoint(BASE, KEY, transport=httpx.MockTransport(api), clock=clock)  # real sleep
    decided = hp.wait_for_decision("r", initial_interval=30)
    assert decided["directive"]["action"] == "wait"  # its not_before has passed: the gate grants
    assert len(api.of("step")) <= 3


def test_it_gives_up_after_the_timeout_with_the_last_step(api: FakeApi) -> None:
    clock = FakeClock()
    api.script("step", ok(HELD, '"1.1"'), *[not_modified('"1.1"')] * 100)
    with pytest.raises(DecisionTimeout) as caught:
        client(api, clock).wait_for_decision("r", timeout=60, initial_interval=1, max_interval=10)
    assert caught.value.step is not None and caught.value.step["state"] == "awaiting_approval"
    assert clock.now == pytest.approx(60)


def test_throttling_while_polling_slows_down_instead_of_failing(api: FakeApi) -> None:
    clock = FakeClock()
    api.script("step", ok(HELD, '"1.1"'), problem(429, "throttled", retry_after=20), ok(APPROVED, '"1.2"'))
    assert client(api, clock).wait_for_decision("r", initial_interval=1)["state"] == "retry_ready"
    assert clock.sleeps[1] >= 18


def test_a_missing_step_is_an_error_not_a_wait(api: FakeApi) -> None:
    api.script("step", problem(404, "not_found"))
    with pytest.raises(NotFound):
        client(api, FakeClock()).wait_for_decision("r")


def test_sleep_until_waits_for_a_not_before(hp: Holdpoint, sleeps: list[float]) -> None:
    hp.sleep_until((dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30)).isoformat())
    hp.sleep_until("2020-01-01T00:00:00Z")
    hp.sleep_until(None)
    assert len(sleeps) == 1 and 29 <= sleeps[0] <= 30
