"""accounts 0001 and the migrations around it (issue 24): Team, ApiKey and Membership move to
accounts and Decision to the core in migration state only, so a database made by the code from
before the move migrates in place: the same tables, the same rows, read through the new models.

The old database is made by the old code itself: the commit before accounts existed, taken out
of git into a temporary tree, migrated and filled by a fresh process there; then the current code
migrates it in a fresh process of its own, on the engine the suite runs on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import textwrap
from io import BytesIO
from pathlib import Path

import pytest

from tests.deploy.deployment import base_environment, drop_database, fresh_database_url

ROOT = Path(__file__).resolve().parents[2]

# (a name for the rows, the model's label before the move, its label after)
MOVED = [
    ("teams", "envelopes.Team", "accounts.Team"),
    ("keys", "envelopes.ApiKey", "accounts.ApiKey"),
    ("memberships", "approvals.Membership", "accounts.Membership"),
    ("decisions", "approvals.Decision", "envelopes.Decision"),
    ("steps", "envelopes.Step", "envelopes.Step"),
    ("tools", "envelopes.Tool", "envelopes.Tool"),
    ("endpoints", "webhooks.WebhookEndpoint", "webhooks.WebhookEndpoint"),
]
ACTIVE_KEY, REVOKED_KEY = "hp_activeKEY-not-a-secret-0001", "hp_revokedKEY-not-a-secret-002"

# Run by the old code: rows of every moved model, and a permission on each through a group.
FILL = f"""
from django.contrib.auth.models import Group, Permission, User
from django.utils import timezone

from approvals.models import Decision, Membership
from envelopes.models import ApiKey, Step, Team, Tool
from webhooks.models import WebhookEndpoint

now = timezone.now()
acme = Team.objects.create(slug="acme", name="Acme")
globex = Team.objects.create(slug="globex", name="Globex")
for team, raw, revoked in ((acme, {ACTIVE_KEY!r}, None), (globex, {REVOKED_KEY!r}, now)):
    ApiKey.objects.create(
        team=team, name="agent", prefix=raw[:ApiKey.PREFIX_LENGTH], key_hash=ApiKey.hash_key(raw), revoked_at=revoked
    )
rita, sam = User.objects.create_user("rita"), User.objects.create_user("sam")
Membership.objects.create(user=rita, team=acme, role="reviewer")
Membership.objects.create(user=sam, team=acme, role="admin")
Membership.objects.create(user=rita, team=globex, role="viewer")
tool = Tool.objects.create(team=acme, name="issue_refund", required_approvals=2)
common = dict(team=acme, tool=tool, state_entered_at=now)
held = Step.objects.create(
    operation_ref="held", state="awaiting_approval", reason="approval_pending", approval_fingerprint="a" * 64, **common
)
done = Step.objects.create(operation_ref="done", state="cancelled", reason="cancelled", **common)
Decision.objects.create(step=held, reviewer=rita, action="approve", input_fingerprint="a" * 64, decided_at=now)
Decision.objects.create(
    step=held, reviewer=sam, action="approve", input_fingerprint="b" * 64, edited=True,
    edited_input={{"amount": 5}}, reason="a smaller refund", decided_at=now,
)
Decision.objects.create(step=done, reviewer=sam, action="cancel", reason="duplicate", decided_at=now)
WebhookEndpoint.objects.create(team=acme, url="https://example.com/hook", secret="whsec_not-a-secret")
auditors = Group.objects.create(name="auditors")
for app, codename in (("envelopes", "change_team"), ("envelopes", "view_apikey"),
                      ("approvals", "view_membership"), ("approvals", "view_decision")):
    auditors.permissions.add(Permission.objects.get(content_type__app_label=app, codename=codename))
sam.groups.add(auditors)
"""

# Tables that migrations after the move add, besides it.
LATER_TABLES = ["approvals_cancelallrequest"]

# Run by either code: the rows of each model (by the labels given), and the tables there are.
DUMP = """
import json, sys
from django.apps import apps
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection

labels = json.loads(sys.argv[1])
rows = {name: list(apps.get_model(label).objects.order_by("pk").values()) for name, label in labels}
rows["tables"] = sorted(connection.introspection.table_names())
print(json.dumps(rows, cls=DjangoJSONEncoder, sort_keys=True))
"""

# Run by the new code on the migrated database: the models work as the app uses them.
USE = f"""
import json
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from rest_framework.test import APIClient

from accounts.models import Membership, Team
from accounts.services import api_key_create
from envelopes.models import Decision, Step

acme = Team.objects.get(slug="acme")
held = Step.objects.get(operation_ref="held")
client = APIClient()
steps = client.get("/api/v1/steps", HTTP_AUTHORIZATION="Bearer {ACTIVE_KEY}", secure=True)
revoked = client.get("/api/v1/steps", HTTP_AUTHORIZATION="Bearer {REVOKED_KEY}", secure=True)
fresh = api_key_create(team=acme, name="after").raw
sam = User.objects.get(username="sam")
listed = [step["operation_ref"] for step in steps.json()["results"]] if steps.status_code == 200 else steps.status_code
kinds = ContentType.objects.filter(model__in=["team", "apikey", "membership", "decision"])
print(json.dumps({{
    "listed": sorted(listed) if isinstance(listed, list) else listed,
    "revoked": revoked.status_code,
    "new key": client.get("/api/v1/steps", HTTP_AUTHORIZATION="Bearer " + fresh, secure=True).status_code,
    "held decisions": [d.action for d in held.decisions.all()],
    "decision step team": Decision.objects.filter(step__team=acme).count(),
    "acme reviewers": sorted(m.user.username for m in acme.memberships.all() if m.can_decide),
    "rita's teams": sorted(m.team.slug for m in Membership.objects.filter(user__username="rita")),
    "sam's permissions": sorted(p for p in sam.get_all_permissions() if not p.startswith("auth.")),
    "content types": sorted(f"{{kind.app_label}}.{{kind.model}}" for kind in kinds),
}}, sort_keys=True))
"""


SETUP = "import django, os\nos.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings')\ndjango.setup()\n"


def base_commit() -> str:
    """The last commit without the accounts app: the parent of the first one that added a file
    under accounts/."""
    added = git("log", "--diff-filter=A", "--format=%H", "--", "accounts").split()
    assert added, "no commit added accounts/"
    return git("rev-parse", f"{added[-1]}^")


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        pytest.skip(f"needs the repository's git history: git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def old_tree(into: Path) -> Path:
    archive = subprocess.run(
        ["git", "archive", base_commit()], cwd=ROOT, capture_output=True, timeout=120, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    (into / "var").mkdir(exist_ok=True)
    return into


def run(tree: Path, env: dict[str, str], *args: str, script: str | None = None) -> str:
    """`python manage.py ARGS` in `tree` in a fresh process, or the script with ARGS as its
    argv, after django.setup(); its output, failing the test on a non-zero exit."""
    if script is None:
        command = [sys.executable, "manage.py", *args]
    else:
        command = [sys.executable, "-c", SETUP + textwrap.dedent(script), *args]
    # The tree first on the path: its own packages, never the ones of the checkout running the test.
    done = subprocess.run(
        command, cwd=tree, env={**env, "PYTHONPATH": str(tree)}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{command[1:3]} in {tree} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def environment(database_url: str) -> dict[str, str]:
    env = base_environment(database_url, ALLOWED_HOSTS="testserver")
    env["SECRET_KEY"] = os.environ.get("SECRET_KEY") or env["SECRET_KEY"]
    return env


def test_a_database_of_the_old_code_migrates_in_place_with_its_rows(tmp_path: Path) -> None:
    old = old_tree(tmp_path / "old")
    assert not (old / "accounts").exists() and (old / "approvals" / "models.py").is_file()
    database_url, created = fresh_database_url(tmp_path)
    try:
        env = environment(database_url)
        run(old, env, "migrate", "--noinput")
        run(old, env, script=FILL)
        before = json.loads(run(old, env, json.dumps([(name, was) for name, was, _ in MOVED]), script=DUMP))

        run(ROOT, env, "migrate", "--noinput")
        after = json.loads(run(ROOT, env, json.dumps([(name, now) for name, _, now in MOVED]), script=DUMP))

        # Tables of models added after the move (cancel-all requests, rules, groups, ...) are the
        # later migrations' own; a renamed or dropped table would be missing here.
        assert set(before["tables"]) <= set(after["tables"])
        assert set(LATER_TABLES) <= set(after["tables"])
        after["tables"] = [name for name in after["tables"] if name in before["tables"]]
        for name, _, _ in MOVED:  # columns added later (a step's policy, ...) are theirs too
            rows = zip(after[name], before[name], strict=True)
            after[name] = [{field: row[field] for field in old} for row, old in rows]
        assert after == before  # every row of every moved model, and not one table renamed
        assert [len(before[name]) for name, _, _ in MOVED] == [2, 2, 3, 3, 2, 1, 1]
        assert "envelopes_team" in after["tables"] and "approvals_decision" in after["tables"]
        assert json.loads(run(ROOT, env, script=USE)) == {
            "listed": ["done", "held"],
            "revoked": 401,
            "new key": 200,
            "held decisions": ["approve", "approve"],
            "decision step team": 3,
            "acme reviewers": ["rita", "sam"],
            "rita's teams": ["acme", "globex"],
            "sam's permissions": [
                "accounts.change_team",
                "accounts.view_apikey",
                "accounts.view_membership",
                "envelopes.view_decision",
            ],
            "content types": ["accounts.apikey", "accounts.membership", "accounts.team", "envelopes.decision"],
        }
        run(ROOT, env, "makemigrations", "--check", "--dry-run")
        run(ROOT, env, "migrate", "--check")
    finally:
        drop_database(created)


def test_a_fresh_database_migrates_to_the_models_as_they_are(tmp_path: Path) -> None:
    database_url, created = fresh_database_url(tmp_path)
    try:
        env = environment(database_url)
        run(ROOT, env, "migrate", "--noinput")
        assert "No changes detected" in run(ROOT, env, "makemigrations", "--check", "--dry-run")
    finally:
        drop_database(created)
