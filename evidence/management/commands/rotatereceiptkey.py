from django.core.management.base import BaseCommand, CommandError

from evidence.keys import RotationRefused, key_rotate


class Command(BaseCommand):
    help = "Add a receipt signing key; it signs from now on, and every older key stays in the JWKS."

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        try:
            key = key_rotate()
        except RotationRefused as refused:
            raise CommandError(str(refused)) from refused
        # The kid only: the private key never leaves the database.
        self.stdout.write(f"receipt key {key.kid} (generation {key.generation}) signs from now on")
