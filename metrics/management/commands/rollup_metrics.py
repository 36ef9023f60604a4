"""`python manage.py rollup_metrics [--rebuild-from 2026-11-01T00:00:00Z]`"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from metrics.api import parse_time
from metrics.services import metrics_rollup


class Command(BaseCommand):
    help = "Roll closed hours up into the metrics rollups (beat does this every few minutes)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--rebuild-from",
            help="RFC 3339 time: roll every hour from then on again (after a backfill or restore).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        rebuild_from = None
        if options["rebuild_from"]:
            rebuild_from = parse_time(options["rebuild_from"])
            if rebuild_from is None:
                raise CommandError("--rebuild-from must be an RFC 3339 time with an offset")
        hours = metrics_rollup(rebuild_from=rebuild_from)
        self.stdout.write(f"rolled {hours} hour(s)")
