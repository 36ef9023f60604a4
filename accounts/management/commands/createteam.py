from django.core.management.base import BaseCommand, CommandError

from accounts.services import AccountError, team_create


class Command(BaseCommand):
    help = "Create a team."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("slug")
        parser.add_argument("--name", default="")

    def handle(self, *args, slug: str, name: str, **options):  # type: ignore[no-untyped-def]
        try:
            team = team_create(slug=slug, name=name)
        except AccountError as error:
            raise CommandError(str(error)) from error
        self.stdout.write(f"Created team {team.slug}")
