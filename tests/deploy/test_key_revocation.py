"""A revoked API key answers 401 on its next call in every web process, though each process
remembers the keys it has read (accounts.auth): gunicorn's workers as deployed, the key revoked
by `manage.py revokeapikey` in a process of its own."""

from __future__ import annotations

import httpx
import pytest

from accounts.services import api_key_create, team_create
from tests import worker
from tests.deploy.deployment import base_environment, gunicorn, manage

CALLS = 24  # each on a new connection, so that every worker takes some


@pytest.mark.django_db(transaction=True)
def test_every_worker_refuses_a_key_revoked_elsewhere() -> None:
    created = api_key_create(team=team_create(slug="acme"), name="agent")
    # The Redis cache (a database of its own): workers remember keys.
    env = base_environment(worker.test_database_url(), CACHE_URL="redis://127.0.0.1:6379/13", HOLDPOINT_HTTPS="false")
    headers = {"Authorization": f"Bearer {created.raw}"}
    with gunicorn(env, workers=3) as url:
        before = [httpx.get(f"{url}/api/v1/steps", headers=headers, timeout=30).status_code for _ in range(CALLS)]
        done = manage(env, "revokeapikey", "--team", "acme", "--prefix", created.api_key.prefix)
        after = [httpx.get(f"{url}/api/v1/steps", headers=headers, timeout=30).status_code for _ in range(CALLS)]

    assert before == [200] * CALLS
    assert "Revoked API key" in done.stdout
    assert after == [401] * CALLS
