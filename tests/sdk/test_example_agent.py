"""examples/agent.py plays every seed scenario against a real Holdpoint."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from django.test.utils import override_settings
from pytest_django.live_server_helper import LiveServer

from envelopes.configuration import api_key_create, team_create
from envelopes.models import Step, Tool

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent.py"


@pytest.fixture(scope="session")
def live_server(request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    address = request.config.getvalue("liveserver") or "localhost"
    with override_settings(SECURE_SSL_REDIRECT=False, SECURE_HSTS_SECONDS=0):
        server = LiveServer(address)
    yield server
    server.stop()


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_agent", EXAMPLE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.django_db(transaction=True)
def test_the_example_agent_gets_the_promised_directive_in_every_scenario(
    live_server: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    team = team_create(slug="demo")
    key = api_key_create(team=team, name="example").raw
    code = load_example().main(
        ["--base-url", live_server.url, "--api-key", key, "--run-id", "demo-1", "--retry-after", "1"]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "every directive was the one the contract promises" in printed
    states = dict(Step.objects.filter(team=team).values_list("operation_ref", "state"))
    assert states == {
        "demo-1/send_email": "succeeded",
        "demo-1/search_contacts": "succeeded",
        "demo-1/create_invoice": "succeeded",
        "demo-1/issue_refund": "awaiting_approval",
        "demo-1/charge_1": "waiting_retry",
    }
    assert Tool.objects.get(team=team, name="charge_card").is_halted()
    assert "/steps/" in printed  # the reviewer's link
