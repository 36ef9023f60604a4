from django.core.management.base import BaseCommand, CommandError

from accounts.models import Team
from accounts.services import api_key_create


class Command(BaseCommand):
    help = "Create an API key; the key is printed alone on the last line, and stored hashed."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--team", required=True)
        parser.add_argument("--name", required=True)

    def handle(self, *args, team: str, name: str, **options):  # type: ignore[no-untyped-def]
        found = Team.objects.filter(slug=team).first()
        if found is None:
            raise CommandError(f"No team {team!r}.")
        created = api_key_create(team=found, name=name)
        self.stdout.write(f"API key {created.api_key.prefix}… for team {found.slug} ({name}); shown once:")
        self.stdout.write(created.raw)
