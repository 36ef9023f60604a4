from django.core.management.base import BaseCommand, CommandError

from accounts.models import Team
from envelopes.audit import audit_seal, audit_verify


class Command(BaseCommand):
    help = "Check every audit hash chain and seal; exits non-zero on any tampering."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--seal", action="store_true", help="seal every team's chains first")

    def handle(self, *args, seal: bool, **options):  # type: ignore[no-untyped-def]
        if seal:
            for team in Team.objects.all():
                audit_seal(team=team)
        problems = audit_verify()
        if problems:
            for problem in problems:
                self.stderr.write(str(problem))
            raise CommandError(f"audit log tampered: {len(problems)} problem(s)")
        self.stdout.write("audit log intact")
