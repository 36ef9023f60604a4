"""Contract §8 v1.1: with DATABASE_URL, CELERY_BROKER_URL, SECRET_KEY and ALLOWED_HOSTS set,
`python manage.py migrate` then `gunicorn config.wsgi` is a working deployment, no other set-up
command (before, every API call answered 500: the cache table was made only by scripts/run)."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.conftest import error_envelope
from tests.deploy.deployment import base_environment, drop_database, fresh_database_url, gunicorn, manage

# TLS ends at a proxy in front of gunicorn (HOLDPOINT_BEHIND_PROXY), as the README describes.
BEHIND_TLS = {"X-Forwarded-Proto": "https"}


def test_migrate_then_gunicorn_answers_the_api_and_the_dashboard(tmp_path: Path) -> None:
    database_url, created = fresh_database_url(tmp_path)
    try:
        env = base_environment(database_url, HOLDPOINT_BEHIND_PROXY="true", HOLDPOINT_METRICS_TOKEN="scrape-me")
        manage(env, "migrate", "--noinput")
        manage(env, "createteam", "acme")
        key = manage(env, "createapikey", "--team", "acme", "--name", "agent").stdout.strip().splitlines()[-1]

        with gunicorn(env, workers=2) as url:
            headers = {**BEHIND_TLS, "Authorization": f"Bearer {key}"}
            answers = [
                httpx.post(f"{url}/api/v1/envelopes", json=error_envelope(operation_ref=f"op-{n}"), headers=headers)
                for n in range(3)
            ]
            assert [answer.status_code for answer in answers] == [201, 201, 201], answers[0].text
            assert answers[0].json()["step"]["state"] == "needs_input"
            assert httpx.get(f"{url}/api/v1/steps", headers=headers).json()["results"]

            ready = httpx.get(f"{url}/readyz")
            assert ready.status_code == 200, ready.text
            assert ready.json()["database"] == "ok" and ready.json()["cache"] == "ok"

            login = httpx.get(f"{url}/accounts/login/", headers=BEHIND_TLS)
            assert login.status_code == 200 and 'name="password"' in login.text

            # A Prometheus scraper with HOLDPOINT_METRICS_TOKEN from the environment.
            scraped = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer scrape-me"})
            assert scraped.status_code == 200 and "holdpoint_" in scraped.text
            assert httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer guess"}).status_code == 401
    finally:
        drop_database(created)
