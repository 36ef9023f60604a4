"""What a keyed call's claim row costs the database: one entry in each index of its table. The
table keeps the indexes its reads need (the key, besides its primary key, which the purge walks)
and no other; a team's rows are found through the key's unique index, which starts with the team."""

from __future__ import annotations

import pytest
from django.db import connection

from envelopes.models import IdempotencyRecord

pytestmark = pytest.mark.django_db


def test_the_idempotency_table_has_only_the_indexes_its_reads_need() -> None:
    table = IdempotencyRecord._meta.db_table
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    indexed = sorted(
        tuple(info["columns"])
        for info in constraints.values()
        if (info["index"] or info["unique"]) and not info["primary_key"]
    )
    assert indexed == [("team_id", "endpoint", "key")], indexed
