"""`createreviewer --group NAME` (repeatable) in a fresh process, and the single sign-on claim's
groups (contract §12): claim-made group memberships are replaced at each sign-in, local ones stay."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from accounts.claims import claimed_access
from accounts.groups import group_create, group_member_add, groups_from_claim, groups_of
from accounts.models import GroupMembership, Membership
from accounts.services import memberships_from_claim
from tests import worker

ROOT = Path(__file__).resolve().parents[2]


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.django_db(transaction=True)
def test_createreviewer_puts_the_reviewer_in_each_group_named(team, django_user_model) -> None:
    env = {
        **os.environ,
        "HOLDPOINT_PASSWORD": "a long enough password 2026",
        "DATABASE_URL": worker.test_database_url(),  # the test database, on SQLite or PostgreSQL
        "PYTHONPATH": str(ROOT),
    }
    made = _manage(
        "createreviewer", "fay", "--team", "acme", "--role", "reviewer", "--group", "finance", "--group", "ops", env=env
    )
    assert made.returncode == 0, made.stderr
    assert "fay: reviewer of acme, in finance, ops" in made.stdout
    fay = django_user_model.objects.get(username="fay")
    assert groups_of(user=fay, team=team) == {"finance", "ops"}
    assert set(GroupMembership.objects.filter(user=fay).values_list("source", flat=True)) == {"local"}

    bad = _manage("createreviewer", "gil", "--team", "acme", "--role", "reviewer", "--group", "Fin_ance", env=env)
    assert bad.returncode != 0
    assert "--group" in bad.stderr and "nothing was changed" in bad.stderr
    assert not django_user_model.objects.filter(username="gil").exists()

    viewer = _manage("createreviewer", "vic", "--team", "acme", "--role", "viewer", "--group", "finance", env=env)
    assert viewer.returncode != 0 and "viewer" in viewer.stderr


@pytest.mark.django_db
def test_a_sign_in_s_claim_replaces_claim_made_groups_and_keeps_local_ones(team, make_reviewer) -> None:
    fay = make_reviewer("fay", "reviewer")
    for name in ("finance", "ops", "legal"):
        group_create(team=team, name=name)
    group_member_add(team=team, name="legal", user=fay)  # local: stays

    def sign_in(*values: str) -> None:
        applied = memberships_from_claim(user=fay, claimed=claimed_access(list(values)))
        groups_from_claim(user=fay, claimed=applied.groups)

    sign_in("holdpoint:acme:reviewer", "holdpoint:acme:group:finance", "holdpoint:acme:group:ops")
    assert groups_of(user=fay, team=team) == {"finance", "ops", "legal"}
    assert GroupMembership.objects.get(user=fay, group__name="finance").source == Membership.Source.CLAIM
    sign_in("holdpoint:acme:reviewer", "holdpoint:acme:group:ops", "holdpoint:acme:group:nosuch")
    assert groups_of(user=fay, team=team) == {"ops", "legal"}  # finance gone; a claim makes no group
    sign_in()
    assert groups_of(user=fay, team=team) == {"legal"}
