from django.core.management.base import BaseCommand, CommandError

from accounts.models import Team
from outbound.ssrf import UnsafeTarget
from webhooks.services import endpoint_create


class Command(BaseCommand):
    help = "Register a webhook endpoint for a team; its signing secret is printed alone on the last line (shown once)."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--team", required=True, help="the team's slug")
        parser.add_argument("--url", required=True, help="an http(s) URL on a public address")

    def handle(self, *args, team: str, url: str, **options):  # type: ignore[no-untyped-def]
        found = Team.objects.filter(slug=team).first()
        if found is None:
            raise CommandError(f"No team {team!r}.")
        try:
            created = endpoint_create(team=found, url=url)
        except UnsafeTarget as refusal:
            raise CommandError(f"Refused: {refusal}") from refusal
        self.stdout.write(
            f"Webhook endpoint #{created.endpoint.pk} for team {found.slug}; signing secret (shown once):"
        )
        self.stdout.write(created.secret)
