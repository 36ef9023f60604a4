"""Two admins saving the same version at once, in real threads (PostgreSQL's row locks): one
version is made, the other save is told 412 and changes nothing; the policy chain stays whole."""

from __future__ import annotations

import pytest
from django.db import connection

from accounts.models import Team
from envelopes.audit import audit_verify
from envelopes.models import AuditEvent
from policy.models import RuleSetVersion
from tests.envelopes.test_concurrency import run_together
from tests.rules.conftest import BIG_REFUNDS, NO_PROD_DROPS, RulesClient

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and their waits are PostgreSQL's"),
]


def test_two_saves_of_one_version_make_one_version(member_api, team: Team) -> None:  # type: ignore[no-untyped-def]
    ada, bo = member_api("ada", "admin"), member_api("bo", "admin")
    for round_ in range(3):
        etag = ada.etag()
        first = {**BIG_REFUNDS, "description": f"round {round_} by ada"}
        second = {**NO_PROD_DROPS, "description": f"round {round_} by bo"}
        statuses = run_together(
            [
                lambda rules=[first], tag=etag: RulesClient(ada.raw).put({"rules": rules}, etag=tag).status_code,
                lambda rules=[second], tag=etag: RulesClient(bo.raw).put({"rules": rules}, etag=tag).status_code,
            ]
        )
        assert sorted(statuses) == [200, 412], statuses
    assert list(RuleSetVersion.objects.filter(team=team).order_by("version").values_list("version", flat=True)) == [
        1,
        2,
        3,
    ]
    assert AuditEvent.objects.filter(chain=f"policy:{team.pk}").count() == 3
    assert [str(problem) for problem in audit_verify()] == []
