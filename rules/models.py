"""The head of each team's policy chain: the audit links of its rule-set changes and of the grants
its admins make and revoke (contract §11: "every change is versioned and audited")."""

from __future__ import annotations

from django.db import models

from accounts.models import Team


class TeamPolicyChain(models.Model):
    """One row per team, made at its first change. Its row lock serialises the team's policy
    changes, so the links of the chain are appended one at a time (envelopes.audit)."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="+")
    audit_seq = models.PositiveIntegerField(default=0)
    audit_head = models.CharField(max_length=64, blank=True)

    def __str__(self) -> str:
        return self.audit_chain

    @property
    def audit_chain(self) -> str:
        return f"policy:{self.team_id}"
