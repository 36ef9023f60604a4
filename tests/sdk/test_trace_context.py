"""The SDK sends the agent's W3C trace context (contract §13): the current OpenTelemetry span's
traceparent when the agent uses OpenTelemetry, through a real Holdpoint that keeps it on the
step; nothing, and no import of opentelemetry needed, when it does not."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from holdpoint_sdk import AsyncHoldpoint, Holdpoint, input_fingerprint
from holdpoint_sdk.tracing import trace_context, trace_headers
from opentelemetry.sdk.trace import TracerProvider
from pytest_django.live_server_helper import LiveServer

from accounts.services import api_key_create, team_create
from envelopes.models import Attempt, Step

ROOT = Path(__file__).resolve().parents[2]
tracer = TracerProvider().get_tracer("agent")  # the agent's own, not made global


@pytest.mark.django_db(transaction=True)
def test_the_sync_client_sends_the_current_spans_traceparent(live_server: LiveServer) -> None:
    team = team_create(slug="traced")
    with Holdpoint(live_server.url, api_key_create(team=team, name="sdk").raw, timeout=5) as hp:
        with tracer.start_as_current_span("agent step") as span:
            hp.request_attempt("t/1", tool="create_invoice", input_fingerprint=input_fingerprint({"a": 1}))
            context = span.get_span_context()
        hp.request_attempt("t/2", tool="create_invoice", input_fingerprint=input_fingerprint({"a": 2}))

    step = Step.objects.get(operation_ref="t/1")
    assert step.trace_id == f"{context.trace_id:032x}"
    assert step.trace_parent_id == f"{context.span_id:016x}"
    assert Attempt.objects.get(step=step).trace_id == step.trace_id
    assert Step.objects.get(operation_ref="t/2").trace_id == ""  # no span current: nothing sent


@pytest.mark.django_db(transaction=True)
def test_the_async_client_sends_the_current_spans_traceparent(live_server: LiveServer) -> None:
    team = team_create(slug="traced-async")
    key = api_key_create(team=team, name="sdk").raw

    async def scenario() -> int:
        async with AsyncHoldpoint(live_server.url, key, timeout=5) as hp:
            with tracer.start_as_current_span("agent step") as span:
                answer = await hp.request_attempt("a/1", tool="create_invoice", input_fingerprint="ab" * 32)
                assert answer["step"]["trace_id"] == f"{span.get_span_context().trace_id:032x}"
                return int(span.get_span_context().trace_id)

    trace_id = asyncio.run(scenario())
    assert Step.objects.get(operation_ref="a/1").trace_id == f"{trace_id:032x}"


def test_a_given_traceparent_wins_and_a_malformed_one_is_ignored() -> None:
    given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with tracer.start_as_current_span("agent step"):
        with trace_context(given, "vendor=x"):
            assert trace_headers({"Accept": "json"}) == {
                "Accept": "json",
                "traceparent": given,
                "tracestate": "vendor=x",
            }
        with trace_context("00-nothex-00f067aa0ba902b7-01\r\nX-Evil: 1"):
            headers = trace_headers(None)
            assert headers is not None and headers["traceparent"] != given and "\n" not in headers["traceparent"]
    assert trace_headers({"Accept": "json"}) == {"Accept": "json"}  # no span, nothing given


def test_without_opentelemetry_the_sdk_works_and_sends_nothing(tmp_path: Path) -> None:
    """In a process where `import opentelemetry` fails, as when it is not installed."""
    script = textwrap.dedent(
        """
        import json, sys
        import httpx

        class NoOpenTelemetry:
            def find_spec(self, name, path=None, target=None):
                if name == "opentelemetry" or name.startswith("opentelemetry."):
                    raise ModuleNotFoundError(f"No module named {name!r}")
                return None

        sys.meta_path.insert(0, NoOpenTelemetry())
        from holdpoint_sdk import Holdpoint

        sent = []

        def answer(request):
            sent.append(dict(request.headers))
            return httpx.Response(200, json={"results": [], "next": None})

        with Holdpoint("http://holdpoint.invalid", "hp_x", transport=httpx.MockTransport(answer)) as hp:
            list(hp.list_steps())
        loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
        print(json.dumps({"headers": sent[0], "loaded": loaded}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT / "sdk")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["loaded"] == []
    assert "traceparent" not in found["headers"] and "authorization" in found["headers"]
