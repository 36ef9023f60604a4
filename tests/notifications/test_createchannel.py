"""`python manage.py createchannel` (contract §8), run from the shell in a fresh process."""

from __future__ import annotations

import pytest

from accounts.services import team_create
from notifications.models import Channel
from outbound.signing import secret_decode
from tests.test_commands_shell import manage

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_email_channel_for_the_reviewers() -> None:
    team_create(slug="acme")
    result = manage("createchannel", "--team", "acme", "--kind", "email", "--target", "@reviewers")
    assert result.returncode == 0, result.stderr
    channel = Channel.objects.get()
    assert (channel.kind, channel.target, channel.secret) == ("email", "@reviewers", "")
    assert channel.events == ["approval.requested", "verification.requested", "step.escalated", "tool.halted"]


def test_a_webhook_channel_prints_its_secret_alone_on_the_last_line() -> None:
    team_create(slug="acme")
    result = manage(
        "createchannel",
        "--team",
        "acme",
        "--kind",
        "webhook",
        "--target",
        "http://127.0.0.1:9/hook",
        "--events",
        "step.overdue,tool.halted",
        "--tools",
        "charge_card,create_invoice",
        HOLDPOINT_WEBHOOK_ALLOW_PRIVATE="true",
    )
    assert result.returncode == 0, result.stderr
    secret = result.stdout.strip().splitlines()[-1]
    channel = Channel.objects.get()
    assert secret == channel.secret and secret.startswith("whsec_")
    assert channel.events == ["tool.halted", "step.overdue"]
    assert channel.tools == ["charge_card", "create_invoice"]
    assert 24 <= len(secret_decode(secret)) <= 64


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--team", "nope", "--kind", "email", "--target", "a@example.com"], "No team"),
        (["--team", "acme", "--kind", "email", "--target", "not-an-address"], "target"),
        (["--team", "acme", "--kind", "webhook", "--target", "http://10.0.0.1/hook"], "target"),
        (["--team", "acme", "--kind", "slack", "--target", "http://localhost/hook"], "target"),
        (["--team", "acme", "--kind", "email", "--target", "a@example.com", "--events", "step.exploded"], "events"),
        (["--team", "acme", "--kind", "email", "--target", "a@example.com", "--tools", "Bad Tool"], "tools"),
        (["--team", "acme", "--kind", "pager", "--target", "x"], "kind"),
    ],
)
def test_it_refuses_what_cannot_be_used_with_a_non_zero_exit(args: list[str], says: str) -> None:
    team_create(slug="acme")
    result = manage("createchannel", *args)
    assert result.returncode != 0
    assert says in result.stderr
    assert not Channel.objects.exists()
