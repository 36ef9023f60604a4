"""HOLDPOINT_PASSWORD_LOGIN=false (contract §12): the password form is gone and password sign-in
refused for everyone but superusers, on /accounts/login/ and /admin/ alike; sessions last
HOLDPOINT_SESSION_AGE_S."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.test import Client

from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture
def password_off(settings: Any) -> None:
    settings.HOLDPOINT_PASSWORD_LOGIN = False
    settings.OIDC_ISSUER = "https://idp.example/realms/acme"
    settings.OIDC_RP_CLIENT_ID = "holdpoint"
    settings.HOLDPOINT_OIDC_PROVIDER_NAME = "Keycloak"


def test_the_password_form_is_hidden_when_switched_off(password_off: None, client: Client) -> None:
    html = client.get("/accounts/login/").content.decode()

    assert 'name="password"' not in html
    assert "Sign in with Keycloak" in html
    assert "Password sign-in is switched off" in html


def test_a_reviewers_password_is_refused_when_switched_off(password_off: None, client: Client, reviewer: Any) -> None:
    response = client.post("/accounts/login/", {"username": "rita", "password": PASSWORD})

    assert response.status_code == 200
    assert "Password sign-in is switched off: sign in with Keycloak." in response.content.decode()
    assert "_auth_user_id" not in client.session
    assert client.get("/").status_code == 302


def test_a_staff_password_is_refused_at_the_admin_too(password_off: None, client: Client) -> None:
    User.objects.create_user("ops", password=PASSWORD, is_staff=True)

    client.post("/admin/login/?next=/admin/", {"username": "ops", "password": PASSWORD})

    assert "_auth_user_id" not in client.session


def test_a_superuser_still_signs_in_with_a_password(password_off: None, client: Client) -> None:
    User.objects.create_superuser("root", password=PASSWORD)

    response = client.post("/accounts/login/", {"username": "root", "password": PASSWORD})

    assert response.status_code == 302
    assert client.session["_auth_user_id"]


def test_password_sign_in_works_by_default(client: Client, reviewer: Any) -> None:
    response = client.post("/accounts/login/", {"username": "rita", "password": PASSWORD})

    assert response.status_code == 302
    assert client.session.get_expiry_age() == 12 * 3600 == django_settings.SESSION_COOKIE_AGE
