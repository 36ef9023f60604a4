import sys

from django.core.management.base import BaseCommand, CommandError

from accounts.models import Team
from envelopes.audit_export import audit_export
from envelopes.rfc3339 import parse_rfc3339


def _time(value: str):  # type: ignore[no-untyped-def]
    parsed = parse_rfc3339(value)
    if parsed is None:
        raise CommandError(f"not an RFC 3339 time with an offset: {value!r}")
    return parsed


class Command(BaseCommand):
    help = "Write a team's audit export (the JSON lines of GET /api/v1/teams/TEAM/audit) to stdout."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("team", help="the team's slug")
        parser.add_argument("--since", help="RFC 3339, inclusive")
        parser.add_argument("--until", help="RFC 3339, exclusive")

    def handle(self, *args, team: str, since: str | None, until: str | None, **options):  # type: ignore[no-untyped-def]
        found = Team.objects.filter(slug=team).first()
        if found is None:
            raise CommandError(f"no team {team!r}")
        out = sys.stdout.buffer  # the bytes the API streams, unchanged
        for line in audit_export(
            team=found, since=_time(since) if since else None, until=_time(until) if until else None
        ):
            out.write(line)
        out.flush()
