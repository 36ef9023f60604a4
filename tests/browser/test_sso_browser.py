"""Single sign-on in Chromium (contract §12), against a real OpenID Connect provider in its own
process (django-oauth-toolkit, tests/oidc_provider): sign in, the claim grants acme:reviewer and
acme:group:finance, the reviewer approves; a changed claim at the next sign-in removes the
membership; an expired ID token signs nobody in."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from accounts.groups import group_create, groups_of
from accounts.models import GroupMembership, Membership, Team
from envelopes.configuration import tool_configure
from envelopes.models import Step
from tests.approvals.conftest import approval_envelope, post_envelope
from tests.browser.conftest import Watched
from tests.conftest import AgentClient
from tests.oidc_provider.harness import IDP_PASSWORD, OidcProvider, oidc_provider, sso

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["oidc_provider", "sso"]

OpenPage = Callable[..., Watched]


@pytest.fixture
def provider(sso: OidcProvider, live_server: Any) -> OidcProvider:
    sso.allow_redirect_uri(f"{live_server.url}/oidc/callback/")
    return sso


def sign_in_with_the_provider(page: Page, username: str) -> None:
    page.goto("/")
    page.wait_for_url("**/accounts/login/?next=/")
    page.get_by_role("button", name="Sign in with Test IdP").click()
    page.get_by_label("IdP username").fill(username)
    page.get_by_label("IdP password").fill(IDP_PASSWORD)
    page.get_by_role("button", name="Sign in to the IdP").click()


def test_a_reviewer_signs_in_with_the_provider_approves_and_loses_the_role_with_the_claim(
    open_page: OpenPage, provider: OidcProvider, live_server: Any, team: Team, agent: AgentClient
) -> None:
    # A finance step (contract §12): alice may approve it because the claim puts her in finance.
    group_create(team=team, name="finance")
    tool_configure(team=team, name="wire_transfer", settings={"approver_group": "finance"}, actor="test")
    step = post_envelope(agent, approval_envelope(operation_ref="run_9/wire_17", tool="wire_transfer"))
    provider.set_groups("alice", ["holdpoint:acme:reviewer", "holdpoint:acme:group:finance", "vpn-users"])
    page = open_page().page

    sign_in_with_the_provider(page, "alice")

    page.wait_for_url(f"{live_server.url}/")
    expect(page.get_by_role("heading", name="Review queues")).to_be_visible()
    expect(page.locator(".site-user .username")).to_have_text("alice")
    expect(page.locator("#approvals tbody tr")).to_have_count(1)
    assert Membership.objects.filter(user__username="alice", team=team).values_list("role", "source").get() == (
        "reviewer",
        "claim",
    )
    assert groups_of(user=Membership.objects.get(user__username="alice").user, team=team) == {"finance"}
    page.goto(f"/steps/{step.pk}/")
    expect(page.locator("#held-for")).to_contain_text("for finance")
    page.get_by_label("Reason").fill("Supplier confirmed by phone.")
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("#decision-feedback")).to_contain_text("Approved.")
    step.refresh_from_db()
    assert (step.state, step.reason) == ("retry_ready", "approved")
    assert step.decisions.get().reviewer.username == "alice"  # type: ignore[union-attr]

    # The step page polls, and a poll after the role is gone is a 404: leave it for the queues.
    page.goto("/")
    expect(page.get_by_role("heading", name="Review queues")).to_be_visible()

    # The next sign-in, in another browser, with the role gone from the claim.
    provider.set_groups("alice", ["vpn-users"])
    later = open_page().page
    sign_in_with_the_provider(later, "alice")

    later.wait_for_url(f"{live_server.url}/")
    expect(later.get_by_text("You are not a member of any team yet")).to_be_visible()
    assert not Membership.objects.filter(user__username="alice").exists()
    assert not GroupMembership.objects.filter(user__username="alice").exists()  # claim-made: gone too
    # The first browser's session is alice's too: the role is gone there as well.
    page.reload()
    expect(page.get_by_text("You are not a member of any team yet")).to_be_visible()


def test_an_expired_id_token_signs_nobody_in(
    open_page: OpenPage, provider: OidcProvider, live_server: Any, team: Team
) -> None:
    provider.set_groups("bob", ["holdpoint:acme:admin"])
    provider.tamper(claims={"exp": int(time.time()) - 600, "iat": int(time.time()) - 900})
    page = open_page().page

    sign_in_with_the_provider(page, "bob")

    page.wait_for_url(f"{live_server.url}/accounts/login/")
    expect(page.get_by_role("alert")).to_have_text("Signing in with Test IdP did not work; nobody was signed in.")
    page.goto("/")
    page.wait_for_url("**/accounts/login/?next=/")
    assert not Membership.objects.filter(user__username="bob").exists()
    assert not Step.objects.exists()
