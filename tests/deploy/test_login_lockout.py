"""Logins are rate-limited (django-axes): the 5th failure for one username from one address locks
that pair for 15 minutes, even with the right password, and the page says so (429)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

LIMIT = 5


@pytest.fixture
def rita(make_reviewer) -> Any:  # type: ignore[no-untyped-def]
    return make_reviewer("rita", "reviewer")


def log_in(client: Client, password: str, *, path: str = "/accounts/login/", **meta: str) -> Any:
    return client.post(path, {"username": "rita", "password": password}, **meta)


def fail(client: Client, times: int, **meta: str) -> None:
    """`times` wrong passwords; the one that reaches the limit answers the lock-out page."""
    for attempt in range(1, times + 1):
        answer = log_in(client, "wrong-password", **meta)
        if attempt < LIMIT:
            assert answer.status_code == 200 and 'role="alert"' in answer.content.decode()
        else:
            assert answer.status_code == 429 and "Too many failed logins" in answer.content.decode()


def test_five_failures_lock_the_account_from_that_address_even_for_the_right_password(
    client: Client, rita: Any
) -> None:
    fail(client, LIMIT)

    locked = log_in(client, PASSWORD)

    assert locked.status_code == 429
    page = locked.content.decode()
    assert "Too many failed logins" in page and "rita" in page and "0:15:00" in page
    assert "_auth_user_id" not in client.session
    assert client.get("/").status_code == 302  # still sent to the login page


def test_four_failures_then_the_right_password_logs_in_and_starts_the_count_again(client: Client, rita: Any) -> None:
    fail(client, LIMIT - 1)
    assert log_in(client, PASSWORD).status_code == 302

    client.post("/accounts/logout/")
    fail(client, LIMIT - 1)
    assert log_in(client, PASSWORD).status_code == 302


def test_another_address_still_logs_in_while_one_is_locked(client: Client, rita: Any) -> None:
    fail(client, LIMIT, REMOTE_ADDR="203.0.113.7")

    assert log_in(client, PASSWORD, REMOTE_ADDR="203.0.113.7").status_code == 429
    assert log_in(Client(), PASSWORD, REMOTE_ADDR="198.51.100.20").status_code == 302


def test_the_lock_lifts_after_fifteen_minutes(client: Client, rita: Any) -> None:
    fail(client, LIMIT)
    assert log_in(client, PASSWORD).status_code == 429

    with time_machine.travel(timezone.now() + timedelta(minutes=16), tick=False):
        assert log_in(client, PASSWORD).status_code == 302


def test_the_admin_login_is_limited_too(client: Client, rita: Any) -> None:
    get_user_model().objects.filter(pk=rita.pk).update(is_staff=True)
    path = "/admin/login/?next=/admin/"
    for _ in range(LIMIT - 1):
        assert log_in(client, "wrong-password", path=path).status_code == 200
    assert log_in(client, "wrong-password", path=path).status_code == 429

    locked = log_in(client, PASSWORD, path=path)

    assert locked.status_code == 429 and "Too many failed logins" in locked.content.decode()


def test_behind_a_proxy_the_address_is_the_one_the_proxy_appended(client: Client, rita: Any, settings) -> None:  # type: ignore[no-untyped-def]
    settings.BEHIND_PROXY = True
    proxy = {"REMOTE_ADDR": "10.0.0.2"}
    # The left entries are the client's to write; only the last one is the proxy's.
    fail(client, LIMIT, HTTP_X_FORWARDED_FOR="1.2.3.4, 203.0.113.7", **proxy)

    assert log_in(client, PASSWORD, HTTP_X_FORWARDED_FOR="9.9.9.9, 203.0.113.7", **proxy).status_code == 429
    other = log_in(Client(), PASSWORD, HTTP_X_FORWARDED_FOR="198.51.100.20", **proxy)
    assert other.status_code == 302
