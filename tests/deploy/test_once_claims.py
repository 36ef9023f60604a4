"""One-time form tokens are claims in their own table: a full cache never frees one."""

from __future__ import annotations

import re
import uuid

import pytest
from django.core.cache import cache
from django.test import Client

from accounts.models import ApiKey, Team
from tests.conftest import logged_in

pytestmark = pytest.mark.django_db


def test_reposting_a_key_form_after_the_cache_filled_up_creates_no_second_key(make_reviewer, team: Team) -> None:  # type: ignore[no-untyped-def]
    admin: Client = logged_in(make_reviewer("ada", role="admin"))
    form = {"team": team.slug, "name": "billing-agent", "once": uuid.uuid4().hex}
    first = admin.post("/keys/", form)
    assert re.search(r'<code id="new-api-key">hp_', first.content.decode())

    # The database cache culls the first third of its keys in key order beyond 300 entries:
    # these sort after any "once:…" key, so a claim kept in that cache would be culled.
    for n in range(400):
        cache.set(f"zz-filler-{n}", n, timeout=3600)
    again = admin.post("/keys/", form)

    assert again.status_code == 200
    assert 'id="new-api-key"' not in again.content.decode()
    assert ApiKey.objects.filter(name="billing-agent").count() == 1
