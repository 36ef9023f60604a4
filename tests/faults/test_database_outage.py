"""While PostgreSQL cannot be reached every request answers 503 with Retry-After (problem+json on
the API, a plain page elsewhere), never 500; the first request after it is back is served."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from accounts.services import api_key_create, reviewer_create, team_create
from tests.conftest import PASSWORD, error_envelope
from tests.deploy.deployment import free_port

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(
        settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3",
        reason="a database server that goes away (SQLite is a file in the process; CI runs PostgreSQL)",
    ),
]


class Outage:
    """The connection pointed at a port where nothing listens, as while PostgreSQL restarts."""

    def __init__(self) -> None:
        self.port = connection.settings_dict["PORT"]

    def begin(self) -> None:
        connection.close()
        connection.settings_dict["PORT"] = free_port()

    def end(self) -> None:
        connection.close()
        connection.settings_dict["PORT"] = self.port


@pytest.fixture
def outage() -> Iterator[Outage]:
    outage = Outage()
    yield outage
    outage.end()  # before the test's database is cleaned


@pytest.mark.django_db(transaction=True)
def test_the_api_and_the_pages_answer_503_with_retry_after_and_recover(outage: Outage) -> None:
    team = team_create(slug="acme")
    raw = api_key_create(team=team, name="agent").raw
    reviewer = reviewer_create(team=team, username="rita", password=PASSWORD, role="reviewer")
    browser = Client(raise_request_exception=False)
    browser.force_login(reviewer)
    api = Client(raise_request_exception=False, headers={"Authorization": f"Bearer {raw}"})
    assert api.get("/api/v1/steps").status_code == 200
    assert browser.get("/").status_code == 200

    outage.begin()
    answers = {
        "steps": api.get("/api/v1/steps"),
        "ingest": api.post("/api/v1/envelopes", error_envelope(), content_type="application/json"),
        "queue page": browser.get("/"),
    }
    unknown = api.get("/api/v1/nowhere/at/all")
    outage.end()

    for name, response in answers.items():
        assert response.status_code == 503, (name, response.status_code, response.content[:300])
        assert response["Retry-After"] == "2", name
    for name in ("steps", "ingest"):
        assert answers[name]["Content-Type"] == "application/problem+json"
        body = answers[name].json()
        assert (body["code"], body["status"]) == ("database_unavailable", 503), body
    assert answers["queue page"]["Content-Type"].startswith("text/html")
    assert b"cannot reach its database" in answers["queue page"].content
    assert unknown.status_code == 404  # what needs no database is answered as ever

    # Back: the next requests are served, on a new connection.
    assert api.get("/api/v1/steps").status_code == 200
    assert api.post("/api/v1/envelopes", error_envelope(), content_type="application/json").status_code == 201
    assert browser.get("/").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_a_statement_that_is_wrong_is_still_a_500(outage: Outage) -> None:
    """Only the database's absence is a 503: a broken statement is a bug, and says so."""
    from django import db

    from config import outage as outage_module

    with pytest.raises(db.ProgrammingError) as broken, connection.cursor() as cursor:
        cursor.execute("SELECT * FROM no_such_table_here")
    assert not outage_module.database_unavailable(broken.value)

    outage.begin()
    with pytest.raises(db.OperationalError) as away:
        connection.ensure_connection()
    assert outage_module.database_unavailable(away.value)
