"""The login page at /accounts/login/ (contract §7: fields username and password)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def test_the_login_page_has_username_and_password(client: Client) -> None:
    html = client.get("/accounts/login/").content.decode()

    assert 'name="username"' in html and 'name="password"' in html
    assert 'name="csrfmiddlewaretoken"' in html


def test_a_reviewer_logs_in_and_lands_on_the_queues(client: Client, reviewer: Any) -> None:
    response = client.post("/accounts/login/", {"username": "rita", "password": PASSWORD}, follow=True)

    assert response.redirect_chain[-1][0] == "/"
    assert "Review queues" in response.content.decode()


def test_a_wrong_password_is_refused(client: Client, reviewer: Any) -> None:
    response = client.post("/accounts/login/", {"username": "rita", "password": "nope"})

    assert response.status_code == 200
    assert 'role="alert"' in response.content.decode()


def test_logging_out_is_a_post(client: Client, reviewer: Any) -> None:
    client.force_login(reviewer)

    response = client.post("/accounts/logout/")

    assert response.status_code == 302
    assert client.get("/").status_code == 302
