"""A web process keeps what it loads at start out of the garbage collector's generations, so a
full collection walks only what requests left behind (config/wsgi.py; a full pass over every
module, model and view stopped each thread of a worker for tens of milliseconds)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.deploy.deployment import ROOT, base_environment

PROBE = """
import gc, sys
import config.wsgi
print(gc.get_freeze_count(), int("envelopes.api" in sys.modules and "approvals.views" in sys.modules))
"""


def test_the_wsgi_module_freezes_what_the_process_loaded_with_every_view(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env=base_environment(f"sqlite:///{tmp_path / 'db.sqlite3'}"),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    frozen, views_loaded = done.stdout.split()
    assert int(frozen) > 50_000  # Django, the apps and their views: ~130,000 objects
    assert views_loaded == "1"  # the URLconf was imported before the freeze, and with it the views
