import getpass
import os

from django.core.management.base import BaseCommand, CommandError

from approvals.models import Membership
from approvals.services import reviewer_create
from envelopes.models import Team


class Command(BaseCommand):
    help = "Create a reviewer (password from HOLDPOINT_PASSWORD or a prompt) in a team with a role."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("username")
        parser.add_argument("--team", required=True)
        parser.add_argument("--role", required=True, choices=Membership.Role.values)

    def handle(self, *args, username: str, team: str, role: str, **options):  # type: ignore[no-untyped-def]
        found = Team.objects.filter(slug=team).first()
        if found is None:
            raise CommandError(f"No team {team!r}.")
        password = os.environ.get("HOLDPOINT_PASSWORD")
        if not password:
            try:
                password = getpass.getpass("Password: ")
            except (EOFError, KeyboardInterrupt):
                raise CommandError("No password: set HOLDPOINT_PASSWORD or answer the prompt.") from None
        if len(password) < 8:
            raise CommandError("The password must have at least 8 characters.")
        reviewer_create(username=username, password=password, team=found, role=role)
        self.stdout.write(f"{username} is a {role} of {found.slug}")
