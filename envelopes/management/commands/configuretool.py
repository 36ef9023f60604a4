from django.core.management.base import BaseCommand, CommandError

from accounts.models import Team
from envelopes.configuration import ConfigurationError, parse_setting, tool_configure


class Command(BaseCommand):
    help = "Create or change a tool's settings: configuretool TEAM TOOL KEY=VALUE..."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("team")
        parser.add_argument("tool")
        # Not `settings`: Django's own `--settings` option reads options["settings"] before
        # handle() runs (handle_default_options), so a list there crashed every shell run.
        parser.add_argument("pairs", nargs="*", metavar="KEY=VALUE")

    def handle(self, *args, team: str, tool: str, pairs: list[str], **options):  # type: ignore[no-untyped-def]
        found = Team.objects.filter(slug=team).first()
        if found is None:
            raise CommandError(f"No team {team!r}.")
        try:
            values = {}
            for pair in pairs:
                key, sep, raw = pair.partition("=")
                if not sep:
                    raise ConfigurationError(f"{pair!r} is not KEY=VALUE")
                values[key] = parse_setting(key, raw)
            configured = tool_configure(team=found, name=tool, settings=values, actor="manage.py configuretool")
        except ConfigurationError as error:
            raise CommandError(str(error)) from error
        self.stdout.write(f"Configured {configured.name} for team {found.slug}")
