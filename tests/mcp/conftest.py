"""The proxy end to end: an MCP ClientSession (the `mcp` package) talks over stdio to
`python -m holdpoint_sdk.mcp_proxy` (a real process), which launches tests/mcp/upstream_server.py
(another real process) and asks a live Holdpoint (pytest-django's live server)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import pytest
from django.test.utils import override_settings
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.session import ElicitationFnT
from pytest_django.live_server_helper import LiveServer

from accounts.models import Team
from accounts.services import api_key_create, team_create

UPSTREAM = Path(__file__).resolve().parent / "upstream_server.py"
ROOT = Path(__file__).resolve().parent.parent.parent

CONFIG = """
call_timeout_s = 1.5
read_only = ["get_balance", "find_invoice"]

[tools.create_invoice]
verification_tool = "find_invoice"

[tools.issue_refund]
hold_wait_s = 30
"""


@pytest.fixture(scope="session")
def live_server(request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    """pytest-django's live server, built while the HTTPS redirect is off: SecurityMiddleware
    reads SECURE_SSL_REDIRECT once, when the server thread builds its handler."""
    address = request.config.getvalue("liveserver") or "localhost"
    with override_settings(SECURE_SSL_REDIRECT=False, SECURE_HSTS_SECONDS=0):
        server = LiveServer(address)
    yield server
    server.stop()


@dataclass
class Rig:
    """What a test needs to start the proxy against the live Holdpoint, and to look behind it."""

    url: str
    api_key: str
    team: Team
    state_file: Path
    config_file: Path
    run_id: str = "mcp-e2e"

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "HOLDPOINT_URL": self.url,
            "HOLDPOINT_API_KEY": self.api_key,
            "HOLDPOINT_RUN_ID": self.run_id,
            "UPSTREAM_STATE": str(self.state_file),
            "UPSTREAM_SLOW_S": "4",
            "UPSTREAM_RETRY_S": "2",
            # This tree's SDK, not another checkout's editable install (a worktree tests itself).
            "PYTHONPATH": os.pathsep.join((str(ROOT), str(ROOT / "sdk"))),
            **extra,
        }

    def upstream_state(self) -> dict[str, Any]:
        return json.loads(self.state_file.read_text()) if self.state_file.exists() else {"calls": []}

    def upstream_calls(self, tool: str) -> list[dict[str, Any]]:
        return [call for call in self.upstream_state()["calls"] if call["tool"] == tool]

    @asynccontextmanager
    async def session(
        self,
        *args: str,
        upstream_url: str | None = None,
        errlog: TextIO = sys.stderr,
        elicitation_callback: ElicitationFnT | None = None,
        **env: str,
    ) -> AsyncIterator[ClientSession]:
        """A client session with the proxy, which launches the upstream server (or reaches it
        at `upstream_url` over streamable HTTP); the proxy's stderr goes to `errlog`. With an
        `elicitation_callback` the client declares the elicitation capability and answers
        the proxy's forms with it."""
        upstream = ["--upstream-url", upstream_url] if upstream_url else ["--upstream", f"{sys.executable} {UPSTREAM}"]
        parameters = StdioServerParameters(
            command=sys.executable,
            args=["-m", "holdpoint_sdk.mcp_proxy", "--config", str(self.config_file), *args, *upstream],
            env=self.env(**env),
            cwd=str(ROOT),
        )
        async with (
            stdio_client(parameters, errlog=errlog) as (read, write),
            ClientSession(read, write, elicitation_callback=elicitation_callback) as session,
        ):
            await session.initialize()
            yield session


@pytest.fixture
def rig(live_server: LiveServer, tmp_path: Path) -> Rig:
    team = team_create(slug="mcp")
    config = tmp_path / "holdpoint-mcp.toml"
    config.write_text(CONFIG)
    return Rig(
        url=live_server.url,
        api_key=api_key_create(team=team, name="mcp-proxy").raw,
        team=team,
        state_file=tmp_path / "upstream.json",
        config_file=config,
    )
