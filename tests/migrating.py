"""Moving the test database between migration states: a data migration's test goes back to the
state before it, writes what the old code wrote, and must leave the schema at the latest state,
because the other tests in the run share the database (rolling one app back rolls back every app
that depends on it)."""

from __future__ import annotations

from django.apps.registry import Apps
from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate(targets: list[tuple[str, str]]) -> Apps:
    """Migrates to `targets` and returns the models as they were there."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def migrate_to_latest() -> None:
    """Migrates every app forward to its last migration, as `manage.py migrate` would."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
