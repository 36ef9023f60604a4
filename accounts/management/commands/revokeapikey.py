from django.core.management.base import BaseCommand, CommandError

from accounts.models import ApiKey, Team
from accounts.services import api_keys_revoke


class Command(BaseCommand):
    help = "Revoke a team's API key by its visible prefix (hp_ and 8 characters); its next request answers 401."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--team", required=True)
        parser.add_argument("--prefix", required=True, help="the prefix createapikey printed, e.g. hp_AbCd1234")

    def handle(self, *args, team: str, prefix: str, **options):  # type: ignore[no-untyped-def]
        found = Team.objects.filter(slug=team).first()
        if found is None:
            raise CommandError(f"No team {team!r}.")
        prefix = prefix.rstrip("…")
        if len(prefix) != ApiKey.PREFIX_LENGTH or not prefix.startswith("hp_"):
            raise CommandError(f"A prefix is 'hp_' and 8 characters ({ApiKey.PREFIX_LENGTH} in all), not {prefix!r}.")
        keys = ApiKey.objects.filter(team=found, prefix=prefix)
        if not keys.exists():
            raise CommandError(f"Team {found.slug} has no API key {prefix}….")
        revoked = api_keys_revoke(keys)
        if revoked == 0:
            self.stdout.write(f"API key {prefix}… of team {found.slug} was already revoked.")
        else:
            self.stdout.write(f"Revoked API key {prefix}… of team {found.slug}.")
