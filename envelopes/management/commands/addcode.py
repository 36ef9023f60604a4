from django.core.management.base import BaseCommand, CommandError

from accounts.models import Team
from envelopes.configuration import ConfigurationError, error_code_upsert


class Command(BaseCommand):
    help = "Add or change a catalog entry: addcode TEAM TOOL|* CODE KEY=VALUE..."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("team")
        parser.add_argument("tool")
        parser.add_argument("code")
        parser.add_argument("fields", nargs="*", metavar="KEY=VALUE")

    def handle(self, *args, team: str, tool: str, code: str, fields: list[str], **options):  # type: ignore[no-untyped-def]
        found = Team.objects.filter(slug=team).first()
        if found is None:
            raise CommandError(f"No team {team!r}.")
        try:
            values = {}
            for pair in fields:
                key, sep, raw = pair.partition("=")
                if not sep:
                    raise ConfigurationError(f"{pair!r} is not KEY=VALUE")
                values[key] = raw
            entry = error_code_upsert(team=found, tool_name=tool, code=code, fields=values)
        except ConfigurationError as error:
            raise CommandError(str(error)) from error
        where = entry.tool.name if entry.tool else "team-wide"
        self.stdout.write(f"{entry.code} documented ({where})")
