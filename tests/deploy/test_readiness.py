"""/readyz: the database, the broker and the cache, as a load balancer reads them."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

DOWN_REDIS = {"default": {"BACKEND": "config.cache.HoldpointRedisCache", "LOCATION": "redis://127.0.0.1:1/0"}}


def test_readyz_reports_the_cache_beside_the_database(client: Client) -> None:
    answer = client.get("/readyz")

    assert answer.json()["cache"] == "ok"
    assert answer.json()["database"] == "ok"


def test_a_cache_down_is_reported_but_keeps_the_instance_in_service(client: Client, settings) -> None:  # type: ignore[no-untyped-def]
    settings.CACHES = DOWN_REDIS  # nothing listens on port 1

    answer = client.get("/readyz")

    assert answer.json()["cache"] == "error: ConnectionError"
    if answer.json()["broker"] == "ok":
        assert answer.status_code == 200
        assert answer.json()["status"] == "degraded"
