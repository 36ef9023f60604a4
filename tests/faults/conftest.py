"""Faults of the parts around Holdpoint: its database, its Redis, its broker, its workers."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "faults: injects faults into real processes (PostgreSQL, Redis, workers)")
