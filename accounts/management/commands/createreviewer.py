import getpass
import os

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from accounts.groups import GroupError, group_member_add, group_name_check
from accounts.models import Membership, Team
from accounts.services import reviewer_create


class Command(BaseCommand):
    help = (
        "Create a reviewer (password from HOLDPOINT_PASSWORD or a prompt) in a team with a role. "
        "An existing user is refused unless --reset-password is given."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("username")
        parser.add_argument("--team", required=True)
        parser.add_argument("--role", required=True, choices=Membership.Role.values)
        parser.add_argument(
            "--group",
            action="append",
            default=[],
            metavar="NAME",
            help="put them in the team's reviewer group NAME (made if missing); repeatable",
        )
        parser.add_argument(
            "--reset-password",
            action="store_true",
            help="the user exists: set this new password and give them ROLE in TEAM",
        )

    def handle(self, *args, username: str, team: str, role: str, reset_password: bool, group: list[str], **options):  # type: ignore[no-untyped-def]
        found = Team.objects.filter(slug=team).first()
        if found is None:
            raise CommandError(f"No team {team!r}.")
        for name in group:
            try:
                group_name_check(name, field="--group")
            except GroupError as refused:
                raise CommandError(f"{refused} ({name!r}); nothing was changed.") from None
        if group and role == Membership.Role.VIEWER:
            raise CommandError("--group: a viewer cannot be in a reviewer group; nothing was changed.")
        user_model = get_user_model()
        try:
            user_model._meta.get_field(user_model.USERNAME_FIELD).clean(username, None)  # type: ignore[union-attr]
        except ValidationError as error:
            raise CommandError(f"Username {username!r}: {' '.join(error.messages)}") from None
        existing = user_model.objects.filter(**{user_model.USERNAME_FIELD: username}).first()
        # A second run (a script, a typo in the username) must never take over someone's account.
        if existing is not None and not reset_password:
            raise CommandError(
                f"User {username!r} already exists; nothing was changed. "
                "To give them a new password (and this team and role), run again with --reset-password."
            )
        password = self._password()
        try:
            validate_password(password, user=existing or user_model(**{user_model.USERNAME_FIELD: username}))
        except ValidationError as error:
            raise CommandError("Password refused: " + " ".join(error.messages)) from None
        with transaction.atomic():
            user = reviewer_create(username=username, password=password, team=found, role=role)
            for name in group:
                group_member_add(team=found, name=name, user=user)
        reset = " (password reset)" if existing is not None else ""
        groups = f", in {', '.join(sorted(set(group)))}" if group else ""
        self.stdout.write(f"{username}: {role} of {found.slug}{groups}{reset}")

    def _password(self) -> str:
        password = os.environ.get("HOLDPOINT_PASSWORD")
        if password:
            return password
        try:
            password = getpass.getpass("Password: ")
            again = getpass.getpass("Password (again): ")
        except (EOFError, KeyboardInterrupt):
            raise CommandError("No password: set HOLDPOINT_PASSWORD or answer the prompt.") from None
        if password != again:
            raise CommandError("The two passwords differ; nothing was changed.")
        if not password:
            raise CommandError("No password: set HOLDPOINT_PASSWORD or answer the prompt.")
        return password
