from django.core.management.base import BaseCommand, CommandError

from accounts.models import Team
from notifications.models import EVENTS, Channel
from notifications.services import ChannelInvalid, channel_create


def _list(value: str | None) -> list[str] | None:
    return None if value is None else [part.strip() for part in value.split(",") if part.strip()]


class Command(BaseCommand):
    help = (
        "Add a notification channel to a team (contract §9). For a webhook channel its signing "
        "secret is printed alone on the last line (shown once)."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--team", required=True, help="the team's slug")
        parser.add_argument("--kind", required=True, choices=Channel.Kind.values)
        parser.add_argument(
            "--target",
            required=True,
            help="email: comma-separated addresses, @reviewers or @group:NAME; "
            "slack: its incoming-webhook URL; webhook: a URL",
        )
        parser.add_argument("--events", help=f"comma-separated, among {', '.join(EVENTS)} (default: the first four)")
        parser.add_argument("--tools", help="comma-separated tool names (default: every tool)")
        parser.add_argument("--name", default="", help="a label for the channel")
        parser.add_argument("--batch-window", type=int, dest="batch_window_s", help="seconds (default 60)")
        parser.add_argument("--remind-after", type=int, dest="remind_after_s", help="seconds (default 3600)")
        parser.add_argument("--escalate-to", type=int, dest="escalate_to", help="another channel's id")
        parser.add_argument("--escalate-after", type=int, dest="escalate_after_s", help="seconds")

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        team = Team.objects.filter(slug=options["team"]).first()
        if team is None:
            raise CommandError(f"No team {options['team']!r}.")
        escalate_to = None
        if options["escalate_to"] is not None:
            escalate_to = Channel.objects.filter(team=team, pk=options["escalate_to"]).first()
            if escalate_to is None:
                raise CommandError(f"No channel #{options['escalate_to']} in team {team.slug}.")
        try:
            created = channel_create(
                team=team,
                kind=options["kind"],
                target=options["target"],
                events=_list(options["events"]),
                tools=_list(options["tools"]),
                name=options["name"],
                batch_window_s=options["batch_window_s"],
                remind_after_s=options["remind_after_s"],
                escalate_to=escalate_to,
                escalate_after_s=options["escalate_after_s"],
            )
        except ChannelInvalid as refusal:
            raise CommandError(f"Refused ({refusal.field}): {refusal}") from refusal
        channel = created.channel
        self.stdout.write(
            f"Channel #{channel.pk} ({channel.kind}) for team {team.slug}: {', '.join(channel.events)}"
            + (f"; tools {', '.join(channel.tools)}" if channel.tools else "; every tool")
        )
        if created.secret:
            self.stdout.write("Signing secret (shown once):")
            self.stdout.write(created.secret)
