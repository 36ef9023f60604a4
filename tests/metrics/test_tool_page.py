"""The tool page /tools/<tool>/: metrics as charts, undocumented codes, the catalog, settings."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from django.test import Client

from accounts.models import Team
from accounts.services import reviewer_create
from envelopes.models import ErrorCode, Tool
from metrics.services import metrics_rollup
from tests.metrics.conftest import TOOL, U

pytestmark = pytest.mark.django_db

PAGE = f"/tools/{TOOL}/"
SAVE = f"/tools/{TOOL}/codes"


@pytest.fixture(autouse=True)
def _half_past_noon():  # type: ignore[no-untyped-def]
    with time_machine.travel(U + timedelta(minutes=30), tick=False):
        yield


def browser(username: str, role: str, team: str = "acme") -> Client:
    member_of = Team.objects.get(slug=team)
    user = reviewer_create(username=username, password="correct-horse-battery", team=member_of, role=role)
    client = Client()
    client.force_login(user)
    return client


def undocumented_section(html: str) -> str:
    return html[html.index('id="h-undocumented"') : html.index('id="h-catalog"')]


def test_anonymous_visitors_are_sent_to_the_login_page(scenario, client) -> None:
    response = client.get(PAGE)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/tools/create_invoice/")


def test_a_viewer_reads_the_metrics_as_labelled_charts(scenario) -> None:
    response = browser("vic", "viewer").get(PAGE)
    assert response.status_code == 200
    html = response.content.decode()
    assert html.count("<svg viewBox") == 6
    for title in (
        "Error envelopes by code", "Documented code share", "Pending recovery",
        "Escalations and duplicate writes prevented", "Approvals", "Approval latency",
    ):
        assert f">{title}</strong>" in html
    assert "0.90 target" in html  # the reference line is labelled on the chart
    assert ">0.00</text>" in html and ">1.00</text>" in html  # the share axis has values
    metrics = response.context["metrics"]
    assert metrics["envelopes"]["total"] == 18
    # 15 error envelopes in the last 24 hours, of which C, J (RATE_LIMITED) and M (LATE_CODE) undocumented
    assert metrics["documented_code_share"] == pytest.approx(12 / 15)
    assert "below 0.90" in html


def test_the_page_keeps_to_the_content_security_policy(scenario) -> None:
    html = browser("vic", "viewer").get(PAGE).content.decode()
    assert " style=" not in html
    assert re.search(r"<script(?![^>]*\bsrc=)", html) is None
    assert re.search(r"\son[a-z]+=", html) is None


def test_undocumented_codes_seen_are_listed_with_counts_and_no_form_for_a_viewer(scenario) -> None:
    html = browser("vic", "viewer").get(PAGE).content.decode()
    section = undocumented_section(html)
    assert "<code>RATE_LIMITED</code></td>\n          <td>2</td>" in section
    assert "<code>LATE_CODE</code></td>\n          <td>1</td>" in section
    assert "INVALID_RECIPIENT_ADDRESS" not in section
    assert "Document it" not in html
    assert 'action="/tools/create_invoice/codes"' not in html


def test_a_reviewer_sees_no_catalog_forms_either(scenario) -> None:
    html = browser("rex", "reviewer").get(PAGE).content.decode()
    assert "Document it" not in html
    assert "Add a code" not in html
    assert "add=1" not in browser("rex2", "reviewer").get(PAGE, {"add": "1"}).content.decode()


def test_an_admin_documents_a_code_in_one_step_with_what_agents_sent(scenario) -> None:
    admin = browser("ada", "admin")
    html = admin.get(PAGE).content.decode()
    form = undocumented_section(html)
    form = form[form.index("<code>RATE_LIMITED</code>") :]
    form = form[: form.index("</form>")]
    assert "as rate_limit, transient, wait_and_retry" in form
    fields = dict(re.findall(r'<input type="hidden" name="([a-zA-Z_-]+)" value="([^"]*)"', form))
    assert fields["doc-RATE_LIMITED-code"] == "RATE_LIMITED"
    response = admin.post(SAVE, fields)  # the one click: exactly what the page holds
    assert response.status_code == 303
    assert response["Location"] == "/tools/create_invoice/?team=acme#catalog"
    entry = ErrorCode.objects.get(code="RATE_LIMITED")
    assert (entry.tool.name, entry.category, entry.retry_class, entry.next_action, entry.side_effect) == (
        TOOL, "rate_limit", "transient", "wait_and_retry", "unknown"
    )
    page = admin.get(response["Location"]).content.decode()
    assert "RATE_LIMITED is documented for this tool." in page
    assert "<code>RATE_LIMITED</code>" not in undocumented_section(page)
    assert "<code>LATE_CODE</code>" in undocumented_section(page)


def new_code(**changes: str) -> dict[str, str]:
    data = {
        "team": "acme", "form_prefix": "new", "new-code": "CARD_DECLINED", "new-scope": "tool",
        "new-category": "conflict", "new-retry_class": "abort", "new-next_action": "abort",
        "new-side_effect": "before_commit", "new-description": "The card was declined.", "new-hint": "",
    }
    data.update(changes)
    return data


def test_an_admin_adds_and_then_changes_a_catalog_entry(scenario) -> None:
    admin = browser("ada", "admin")
    assert admin.post(SAVE, new_code()).status_code == 303
    assert admin.post(SAVE, new_code(**{"new-description": "Declined by the issuer."})).status_code == 303
    assert admin.post(SAVE, new_code(**{"new-code": "BANK_DOWN", "new-scope": "team"})).status_code == 303
    card = ErrorCode.objects.get(code="CARD_DECLINED")
    assert (card.tool.name, card.description) == (TOOL, "Declined by the issuer.")
    assert ErrorCode.objects.get(code="BANK_DOWN").tool is None
    html = admin.get(PAGE).content.decode()
    catalog = html[html.index('id="h-catalog"') :]
    assert "<code>CARD_DECLINED</code>" in catalog and "Declined by the issuer." in catalog
    assert "<code>BANK_DOWN</code></td>\n          <td>team-wide</td>" in catalog


def test_an_invalid_entry_is_refused_with_the_reason(scenario) -> None:
    admin = browser("ada", "admin")
    response = admin.post(SAVE, new_code(**{"new-code": "lower_case"}), follow=True)
    assert not ErrorCode.objects.filter(code__iexact="lower_case").exists()
    assert "The code was not saved: code:" in response.content.decode()


def test_a_reviewer_may_not_change_the_catalog(scenario) -> None:
    response = browser("rex", "reviewer").post(SAVE, new_code())
    assert response.status_code == 403
    assert not ErrorCode.objects.filter(code="CARD_DECLINED").exists()


def test_another_teams_member_gets_404_for_the_page_and_the_form(scenario) -> None:
    olga = browser("olga", "admin", team="globex")
    assert olga.get(PAGE + "?team=acme").status_code == 404
    assert olga.get("/tools/send_email/").status_code == 404
    assert olga.post(SAVE, new_code()).status_code == 404
    assert not ErrorCode.objects.filter(code="CARD_DECLINED").exists()
    # Her own team's tool of the same name is hers to see.
    own = olga.get(PAGE)
    assert own.status_code == 200
    assert own.context["metrics"]["envelopes"]["total"] == 1


def test_a_name_in_two_of_the_users_teams_asks_which_one(scenario) -> None:
    globex = Team.objects.get(slug="globex")
    reviewer_create(username="bo", password="correct-horse-battery", team=globex, role="viewer")
    both = browser("bo", "viewer")  # and in acme
    response = both.get(PAGE)
    assert response.status_code == 200, response
    html = response.content.decode()
    assert "Which <code>create_invoice</code>?" in html
    assert '/tools/create_invoice/?team=globex' in html
    assert both.get(PAGE + "?team=globex").context["tool"].team.slug == "globex"


@pytest.mark.parametrize(("window", "caption"), [("7d", "per 6 hours"), ("30d", "per day"), ("bogus", "per hour")])
def test_longer_windows_use_wider_bins(scenario, window, caption) -> None:
    response = browser("vic", "viewer").get(PAGE, {"window": window})
    assert response.status_code == 200
    assert caption in response.content.decode()
    assert response.context["metrics"]["envelopes"]["total"] == 18


def test_htmx_polls_get_only_the_metrics_fragment(scenario) -> None:
    response = browser("vic", "viewer").get(PAGE, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="tool-metrics")
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="tool-metrics"')
    assert "<html" not in html
    assert "HX-Request" in response["Vary"]


def test_an_admin_edits_one_entry_at_a_time(scenario) -> None:
    admin = browser("ada", "admin")
    entry = ErrorCode.objects.get(code="MISSING_APPROVAL")
    html = admin.get(PAGE).content.decode()
    assert 'name="form_prefix" value="edit-' not in html
    assert f'href="/tools/create_invoice/?team=acme&amp;edit={entry.pk}#entry-{entry.pk}">Edit</a>' in html
    html = admin.get(PAGE, {"team": "acme", "edit": str(entry.pk)}).content.decode()
    assert html.count('name="form_prefix" value="edit-') == 1
    assert f'name="edit-{entry.pk}-code" value="MISSING_APPROVAL"' in html


def test_an_admin_opens_the_new_entry_form_on_request(scenario) -> None:
    admin = browser("ada", "admin")
    assert 'name="new-code"' not in admin.get(PAGE).content.decode()
    html = admin.get(PAGE, {"team": "acme", "add": "1"}).content.decode()
    assert 'name="new-code"' in html
    assert 'name="form_prefix" value="new"' in html


def test_a_halted_tool_offers_resume_to_reviewers_only(scenario) -> None:
    Tool.objects.filter(team__slug="acme", name=TOOL).update(
        halted_until=U + timedelta(hours=1), halted_reason="LEDGER_DOWN"
    )
    reviewer_html = browser("rex", "reviewer").get(PAGE).content.decode()
    assert "<code>LEDGER_DOWN</code>" in reviewer_html
    assert 'action="/tools/create_invoice/resume"' in reviewer_html
    assert ">Resume tool</button>" in reviewer_html
    viewer_html = browser("vic", "viewer").get(PAGE).content.decode()
    assert "<code>LEDGER_DOWN</code>" in viewer_html
    assert ">Resume tool</button>" not in viewer_html


def test_the_charts_read_from_rollups_show_what_the_live_read_shows(scenario) -> None:
    viewer = browser("vic", "viewer")
    live = [chart.table_rows for chart in viewer.get(PAGE).context["charts"]]
    metrics_rollup(now=U + timedelta(minutes=30))
    rolled = [chart.table_rows for chart in viewer.get(PAGE).context["charts"]]
    assert rolled == live
    recovery = next(chart for chart in viewer.get(PAGE).context["charts"] if chart.key == "pending-recovery")
    assert ["20 Nov 10:00–11:00", "3.3 min", "6.7 min"] in recovery.table_rows  # 200 s and 400 s


def test_resuming_a_halted_tool_from_its_page_comes_back_to_the_page(scenario) -> None:
    Tool.objects.filter(team__slug="acme", name=TOOL).update(
        halted_until=U + timedelta(hours=1), halted_at=U, halted_reason="LEDGER_DOWN"
    )
    reviewer = browser("rex", "reviewer")
    html = reviewer.get(PAGE, {"window": "7d"}).content.decode()
    resume_form = re.search(r'action="/tools/create_invoice/resume".*?</form>', html, re.S)
    assert resume_form is not None
    back = re.search(r'name="next" value="([^"]+)"', resume_form.group(0)).group(1).replace("&amp;", "&")
    assert back.startswith(PAGE) and "window=7d" in back

    response = reviewer.post(f"/tools/{TOOL}/resume", {"team": "acme", "next": back})
    assert response.status_code == 303
    assert response["Location"] == back
    assert Tool.objects.get(team__slug="acme", name=TOOL).halted_until is None
