"""/account/: the user's own page, where a Slack member is linked to them (contract §10) from a
link Holdpoint signed for that member, and unlinked."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.core import signing
from django.test import Client
from django.utils import timezone

from notifications.models import SlackLink
from notifications.slack import LINK_SALT, Press, link_token
from tests.conftest import logged_in

WORKSPACE = "T0HOLDPT"


def token(member: str, workspace: str = WORKSPACE) -> str:
    return link_token(
        Press(slack_team_id=workspace, slack_user_id=member, action_id="holdpoint.approve", response_url="")
    )


def test_the_page_needs_a_login() -> None:
    response = Client().get("/account/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


@pytest.mark.django_db
def test_it_shows_the_users_teams_the_tokens_page_and_no_slack_link_yet(make_reviewer: Any) -> None:
    page = logged_in(make_reviewer("rita", "reviewer")).get("/account/")
    html = page.content.decode()
    assert page.status_code == 200 and page["Cache-Control"] == "no-store"
    assert "acme: reviewer" in html
    assert 'href="/account/tokens/"' in html
    assert 'id="slack-links-none"' in html


@pytest.mark.django_db
def test_a_signed_link_is_offered_then_linked_by_a_post_and_unlinked(make_reviewer: Any) -> None:
    rita = make_reviewer("rita", "reviewer")
    browser = logged_in(rita)
    offer = browser.get("/account/", {"slack": token("U0RITA")})
    assert f"Link Slack member U0RITA of workspace {WORKSPACE} to rita?" in offer.content.decode()
    assert "If someone sent you this link, do not confirm it" in offer.content.decode()  # forwarded: phishing
    assert offer["Referrer-Policy"] == "same-origin"
    assert not SlackLink.objects.exists()  # a GET links nothing

    assert browser.post("/account/slack/link", {"slack": token("U0RITA")}).status_code == 302
    link = SlackLink.objects.get()
    assert (link.user, link.slack_team_id, link.slack_user_id) == (rita, WORKSPACE, "U0RITA")
    assert 'id="slack-links"' in browser.get("/account/").content.decode()
    # Linking the same pair again changes nothing.
    browser.post("/account/slack/link", {"slack": token("U0RITA")})
    assert SlackLink.objects.count() == 1

    assert browser.post(f"/account/slack/{link.pk}/unlink").status_code == 302
    assert not SlackLink.objects.exists()


@pytest.mark.django_db
def test_a_forged_or_expired_link_links_nothing(make_reviewer: Any) -> None:
    browser = logged_in(make_reviewer("rita", "reviewer"))
    forged = signing.dumps({"t": WORKSPACE, "u": "U0RITA"}, key="not-our-secret", salt=LINK_SALT)
    typed = "U0RITA"
    with time_machine.travel(timezone.now() - timedelta(hours=2)):
        old = token("U0RITA")
    for bad in (forged, typed, old):
        page = browser.get("/account/", {"slack": bad})
        assert 'id="slack-link-invalid"' in page.content.decode() and "slack-link-offer" not in page.content.decode()
        browser.post("/account/slack/link", {"slack": bad})
    assert not SlackLink.objects.exists()


@pytest.mark.django_db
def test_one_slack_id_per_user_per_workspace_and_a_member_is_one_user(make_reviewer: Any) -> None:
    rita, sam = make_reviewer("rita", "reviewer"), make_reviewer("sam", "reviewer")
    logged_in(rita).post("/account/slack/link", {"slack": token("U0RITA")})

    taken = logged_in(sam).post("/account/slack/link", {"slack": token("U0RITA")}, follow=True)
    assert "linked to another Holdpoint user" in taken.content.decode()
    second = logged_in(rita).post("/account/slack/link", {"slack": token("U0RITA2")}, follow=True)
    assert "another Slack account of this workspace" in second.content.decode()
    logged_in(rita).post("/account/slack/link", {"slack": token("U0RITA", workspace="T0OTHER")})
    assert sorted(SlackLink.objects.values_list("user__username", "slack_team_id")) == [
        ("rita", "T0HOLDPT"),
        ("rita", "T0OTHER"),
    ]


@pytest.mark.django_db
def test_a_user_cannot_unlink_anothers_slack_account_and_wrong_methods_are_refused(make_reviewer: Any) -> None:
    rita, sam = make_reviewer("rita", "reviewer"), make_reviewer("sam", "reviewer")
    link = SlackLink.objects.create(user=rita, slack_team_id=WORKSPACE, slack_user_id="U0RITA")
    logged_in(sam).post(f"/account/slack/{link.pk}/unlink")
    assert SlackLink.objects.filter(pk=link.pk).exists()
    assert logged_in(sam).get(f"/account/slack/{link.pk}/unlink").status_code == 405
    assert logged_in(sam).get("/account/slack/link").status_code == 405
    assert logged_in(sam).post("/account/").status_code == 405
