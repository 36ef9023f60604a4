"""Email comes from EMAIL_URL (django-environ's parser); without it, each message is a file under
var/mail/ — what a newcomer running scripts/run reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from accounts.models import Team
from notifications.services import channel_create
from notifications.tasks import notify
from tests.conftest import AgentClient
from tests.notifications.conftest import hold

ROOT = Path(__file__).resolve().parents[2]


def email_settings(**env: str) -> dict[str, Any]:
    """The email settings a fresh process reads from this environment."""
    child_env = {key: value for key, value in os.environ.items() if key != "EMAIL_URL"}
    child_env.update({"DJANGO_SETTINGS_MODULE": "config.settings", "SECRET_KEY": "x" * 60, **env})
    code = (
        "import json, django; django.setup(); from django.conf import settings as s; "
        "print(json.dumps({k: str(getattr(s, k, '')) for k in ('EMAIL_BACKEND', 'EMAIL_HOST', 'EMAIL_PORT', "
        "'EMAIL_USE_TLS', 'EMAIL_USE_SSL', 'EMAIL_HOST_USER', 'EMAIL_FILE_PATH')}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=child_env, capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_email_url_configures_smtp() -> None:
    found = email_settings(EMAIL_URL="smtp+tls://mailer:s3cret@mail.example.com:587")
    assert found["EMAIL_BACKEND"] == "django.core.mail.backends.smtp.EmailBackend"
    assert (found["EMAIL_HOST"], found["EMAIL_PORT"], found["EMAIL_USE_TLS"]) == ("mail.example.com", "587", "True")
    assert found["EMAIL_HOST_USER"] == "mailer"


def test_without_email_url_mail_is_written_under_var_mail() -> None:
    found = email_settings()
    assert found["EMAIL_BACKEND"] == "django.core.mail.backends.filebased.EmailBackend"
    assert found["EMAIL_FILE_PATH"] == str(ROOT / "var" / "mail")


@pytest.mark.usefixtures("no_enqueue")
def test_a_reviewers_channel_writes_a_file_a_newcomer_can_read(
    team: Team, agent: AgentClient, make_reviewer: Any, settings: Any, tmp_path: Path
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    settings.EMAIL_FILE_PATH = tmp_path / "mail"
    rita = make_reviewer("rita", "reviewer")
    rita.email = "rita@example.com"
    rita.save()
    channel_create(team=team, kind="email", target="@reviewers")
    hold(agent, "run_1/newcomer")
    notify()
    (mail,) = (tmp_path / "mail").iterdir()
    text = mail.read_text()
    assert "To: rita@example.com" in text and "Approval requested" in text and "run_1/newcomer" in text
