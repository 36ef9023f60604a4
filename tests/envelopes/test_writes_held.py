"""A write held for the next statement (modelsql.writes_held), which an Idempotency-Key's call
uses to send its stored answer in the statement of its work's last write: whatever runs after
a held write sees it, nothing held is lost at the block's end, and nothing held outlives a
block that raised."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from accounts.models import Team
from envelopes import modelsql
from envelopes.models import Tool

pytestmark = pytest.mark.django_db


def _write(tool: Tool, written: list[Any]) -> None:
    modelsql.write([modelsql.insert(tool)], [], written.append)


def test_a_statement_after_a_held_write_sees_it(team: Team) -> None:
    written: list[Any] = []
    with transaction.atomic(), modelsql.writes_held():
        _write(Tool(team=team, name="held_one"), written)
        assert Tool.objects.filter(name="held_one").count() == 1
        assert written == [()]


def test_write_with_sends_the_held_write_and_the_statement_in_one(team: Team) -> None:
    first = Tool(team=team, name="first_tool")
    second = Tool(team=team, name="second_tool")
    written: list[Any] = []
    with CaptureQueriesContext(connection) as captured, transaction.atomic(), modelsql.writes_held():
        _write(first, written)
        modelsql.write_with(modelsql.insert(second))
    assert set(Tool.objects.filter(team=team).values_list("name", flat=True)) == {"first_tool", "second_tool"}
    assert written == [()]
    inserts = [q["sql"] for q in captured.captured_queries if 'INSERT INTO "envelopes_tool"' in q["sql"]]
    # One statement on PostgreSQL; elsewhere nothing is held and each write is sent as it is made.
    assert len(inserts) == (1 if connection.vendor == "postgresql" else 2), inserts


def test_a_write_held_at_the_end_is_sent(team: Team) -> None:
    with transaction.atomic(), modelsql.writes_held():
        _write(Tool(team=team, name="sent_at_the_end"), [])
    assert Tool.objects.filter(name="sent_at_the_end").exists()


def test_a_second_write_sends_the_first_before_it_is_held(team: Team) -> None:
    """Two writes of one row cannot share a statement (PostgreSQL would apply one of them)."""
    with transaction.atomic(), modelsql.writes_held():
        tool = Tool(pk=modelsql.next_id(Tool), team=team, name="twice_written")
        _write(tool, [])
        modelsql.mark_saved(tool)
        tool.max_attempts = 7
        modelsql.write([modelsql.update(tool, ("max_attempts",))], [], lambda counts: None)
    assert Tool.objects.get(name="twice_written").max_attempts == 7


def test_nothing_held_outlives_a_block_that_raised(team: Team) -> None:
    with (
        CaptureQueriesContext(connection) as captured,
        pytest.raises(RuntimeError),
        transaction.atomic(),
        modelsql.writes_held(),
    ):
        _write(Tool(team=team, name="dropped"), [])
        sent = len(captured.captured_queries)
        raise RuntimeError("the work failed")
    assert [q["sql"] for q in captured.captured_queries[sent:] if "INSERT" in q["sql"]] == []
    with transaction.atomic(), modelsql.writes_held():
        modelsql.write_with(modelsql.insert(Tool(team=team, name="after_the_failure")))
    assert list(Tool.objects.filter(team=team).values_list("name", flat=True)) == ["after_the_failure"]
