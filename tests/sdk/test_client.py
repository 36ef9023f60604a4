"""Each API call: path, headers, body; cursor iteration; retries that are safe."""

from __future__ import annotations

import datetime as dt
import json

import httpx
import pytest
from holdpoint_sdk import Holdpoint, HoldpointUnavailable, ServerError

from .conftest import BASE, KEY, FakeApi, directive, step


def test_every_call_carries_the_key_and_asks_for_json(hp: Holdpoint, api: FakeApi) -> None:
    hp.get_step("a")
    request = api.requests[0]
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    assert "application/problem+json" in request.headers["Accept"]
    assert request.headers["User-Agent"].startswith("holdpoint-sdk-python/")


def test_the_base_url_may_include_the_api_prefix(api: FakeApi) -> None:
    client = Holdpoint(BASE + "/api/v1/", KEY, transport=httpx.MockTransport(api))
    client.get_step("a")
    assert api.requests[0].url.path == "/api/v1/steps/a"


def test_post_envelope_sends_json_and_the_idempotency_key(hp: Holdpoint, api: FakeApi) -> None:
    envelope = {"ok": True, "tool": "t", "operation_ref": "r", "commit_state": "committed"}
    answer = hp.post_envelope(envelope, idempotency_key="key-1")
    [request] = api.of("envelopes")
    assert request.method == "POST"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Idempotency-Key"] == "key-1"
    assert json.loads(request.content) == envelope
    assert answer["directive"]["action"] == "stop"


def test_post_envelope_names_the_dialect(hp: Holdpoint, api: FakeApi) -> None:
    api.script("envelopes", httpx.Response(201, json={}))
    hp.post_envelope({"code": "X"}, dialect="compact")
    assert api.requests[0].headers["Content-Type"] == 'application/json; profile="compact"'


def test_the_attempt_gate_encodes_the_ref_and_sends_the_fingerprint(hp: Holdpoint, api: FakeApi) -> None:
    grant = hp.request_attempt(
        "run_81/step_4", tool="create_invoice", input_fingerprint="a" * 64, run_id="run_81",
        idempotency_key="att-1",
    )  # fmt: skip
    [request] = api.of("attempts")
    assert request.url.raw_path == b"/api/v1/steps/run_81%2Fstep_4/attempts"
    assert json.loads(request.content) == {
        "tool": "create_invoice", "input_fingerprint": "a" * 64, "run_id": "run_81",
    }  # fmt: skip
    assert request.headers["Idempotency-Key"] == "att-1"
    assert grant["attempt"] == 1


def test_a_verification_report_carries_an_rfc3339_time(hp: Holdpoint, api: FakeApi) -> None:
    api.script("verification", httpx.Response(200, json={"step": step(), "directive": directive()}))
    checked = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
    hp.report_verification("r/1", outcome="committed", checked_at=checked, evidence_ref="inv_9")
    [request] = api.of("verification")
    assert request.url.raw_path == b"/api/v1/steps/r%2F1/verification"
    assert json.loads(request.content) == {
        "outcome": "committed", "checked_at": "2026-11-29T12:00:00.000Z", "evidence_ref": "inv_9",
    }  # fmt: skip


def test_a_conditional_read_sends_if_none_match_and_understands_304(hp: Holdpoint, api: FakeApi) -> None:
    first = hp.get_step_if_changed("r", etag=None)
    assert first.modified and first.etag == '"1.1"'
    api.script("step", httpx.Response(304, headers={"ETag": '"1.1"'}))
    second = hp.get_step_if_changed("r", etag=first.etag)
    assert api.requests[-1].headers["If-None-Match"] == '"1.1"'
    assert not second.modified and second.step is None and second.etag == '"1.1"'


def test_list_steps_follows_the_cursor_on_its_own_host(hp: Holdpoint, api: FakeApi) -> None:
    api.script(
        "steps",
        httpx.Response(200, json={"results": [step(operation_ref="a"), step(operation_ref="b")],
                                  "next": "http://evil.example/api/v1/steps?cursor=c2&tool=t"}),
        httpx.Response(200, json={"results": [step(operation_ref="c")], "next": None}),
    )  # fmt: skip
    refs = [s["operation_ref"] for s in hp.list_steps(tool="t", state="escalated")]
    assert refs == ["a", "b", "c"]
    first, second = api.of("steps")
    assert dict(first.url.params) == {"tool": "t", "state": "escalated"}
    assert second.url.host == "holdpoint.test"  # the key never goes to another host
    assert dict(second.url.params) == {"cursor": "c2", "tool": "t"}


def test_codes_metrics_and_skipped(hp: Holdpoint, api: FakeApi) -> None:
    api.script("/api/v1/tools/create_invoice/codes", httpx.Response(200, json={"tool": "x", "codes": []}))
    api.script("/api/v1/tools/create_invoice/metrics", httpx.Response(200, json={"tool": "x"}))
    api.script("/api/v1/runs/run%2F1/skipped", httpx.Response(200, json={"run_id": "run/1", "skipped": []}))
    assert hp.tool_codes("create_invoice")["codes"] == []
    since = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)
    assert hp.tool_metrics("create_invoice", since=since, until="2026-11-30T00:00:00Z")["tool"] == "x"
    assert hp.run_skipped("run/1")["skipped"] == []
    metrics = api.requests[1]
    assert dict(metrics.url.params) == {
        "since": "2026-11-29T00:00:00.000Z", "until": "2026-11-30T00:00:00Z",
    }  # fmt: skip


# --- retries -------------------------------------------------------------------------------


def test_a_read_is_retried_after_a_503_with_backoff(hp: Holdpoint, api: FakeApi, sleeps: list[float]) -> None:
    api.script("step", httpx.Response(503, headers={"Retry-After": "2"}))
    assert hp.get_step("r")["state"] == "in_progress"
    assert len(api.of("step")) == 2
    assert sleeps and sleeps[0] >= 2


def test_a_write_without_an_idempotency_key_is_not_resent_after_it_may_have_arrived(
    hp: Holdpoint, api: FakeApi
) -> None:
    api.script("envelopes", httpx.Response(503))
    with pytest.raises(ServerError):
        hp.post_envelope({"ok": True})
    api.script("envelopes", httpx.ReadTimeout("slow"))
    with pytest.raises(HoldpointUnavailable):
        hp.post_envelope({"ok": True})
    assert len(api.of("envelopes")) == 2


def test_a_write_with_an_idempotency_key_is_retried(hp: Holdpoint, api: FakeApi) -> None:
    api.script("envelopes", httpx.ReadTimeout("slow"), httpx.Response(502))
    hp.post_envelope({"ok": True}, idempotency_key="k")
    sent = api.of("envelopes")
    assert len(sent) == 3
    assert {r.headers["Idempotency-Key"] for r in sent} == {"k"}
    assert len({r.content for r in sent}) == 1  # the same bytes: the replay matches


def test_a_write_that_never_left_is_retried_even_without_a_key(hp: Holdpoint, api: FakeApi) -> None:
    api.script("envelopes", httpx.ConnectError("refused"))
    hp.post_envelope({"ok": True})
    assert len(api.of("envelopes")) == 2


def test_retries_stop_after_max_retries(api: FakeApi, sleeps: list[float]) -> None:
    client = Holdpoint(BASE, KEY, transport=httpx.MockTransport(api), sleep=sleeps.append, max_retries=1)
    api.script("step", httpx.Response(503), httpx.Response(503), httpx.Response(200, json=step()))
    with pytest.raises(ServerError):
        client.get_step("r")
    assert len(api.of("step")) == 2


def test_a_long_retry_after_is_left_to_the_caller(hp: Holdpoint, api: FakeApi) -> None:
    api.script("step", httpx.Response(503, headers={"Retry-After": "3600"}))
    with pytest.raises(ServerError) as caught:
        hp.get_step("r")
    assert caught.value.retry_after == 3600
