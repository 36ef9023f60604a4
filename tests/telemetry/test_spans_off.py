"""Without OTEL_EXPORTER_OTLP_ENDPOINT no exporter runs and nothing of the OpenTelemetry SDK's
tracing is loaded (contract §13): an API call with a traceparent, in a fresh process as deployed.
(redis-py imports `opentelemetry.sdk.metrics` by itself once the SDK is installed, for metrics
of its own that stay off until an application turns them on: not ours to count.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from accounts.models import Team
from accounts.services import api_key_create
from tests import worker
from tests.telemetry.otlp import OtlpReceiver

ROOT = Path(__file__).resolve().parents[2]
CALL = textwrap.dedent(
    """
    import json, sys, threading
    import django
    django.setup()
    from django.test import Client
    from telemetry import spans

    answer = Client().post(
        "/api/v1/steps/off-1/attempts",
        {"tool": "charge_card", "input_fingerprint": "ab" * 32},
        content_type="application/json",
        HTTP_AUTHORIZATION="Bearer " + sys.argv[1],
        HTTP_TRACEPARENT="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    )
    spans.flush()
    ours = ("opentelemetry.sdk.trace", "opentelemetry.exporter")
    loaded = sorted(name for name in sys.modules if name.startswith(ours))
    threads = sorted(thread.name for thread in threading.enumerate())
    print(json.dumps({"status": answer.status_code, "trace_id": answer.json()["step"]["trace_id"],
                      "loaded": loaded, "threads": threads}))
    """
)


def call_in_a_fresh_process(key: str, **env: str) -> dict[str, object]:
    environment = {
        **{name: value for name, value in os.environ.items() if name != "OTEL_EXPORTER_OTLP_ENDPOINT"},
        "DATABASE_URL": worker.test_database_url(),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "HOLDPOINT_HTTPS": "false",
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-c", CALL, key], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.django_db(transaction=True)
def test_without_an_endpoint_no_sdk_is_loaded_and_no_exporter_runs(team: Team) -> None:
    found = call_in_a_fresh_process(api_key_create(team=team, name="agent").raw)

    assert found["status"] == 201
    assert found["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"  # the trace context is kept all the same
    assert found["loaded"] == []
    assert found["threads"] == ["MainThread"]


@pytest.mark.django_db(transaction=True)
def test_with_an_endpoint_the_sdk_exports_from_a_thread_of_its_own(team: Team) -> None:
    receiver = OtlpReceiver()
    try:
        found = call_in_a_fresh_process(
            api_key_create(team=team, name="agent").raw, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint
        )
    finally:
        receiver.close()

    assert found["status"] == 201
    assert "opentelemetry.sdk.trace.export" in found["loaded"]
    assert "OtelBatchSpanRecordProcessor" in found["threads"] or len(found["threads"]) > 1  # type: ignore[operator]
    assert {span.name for span in receiver.spans} >= {"holdpoint.gate", "holdpoint.transition"}
