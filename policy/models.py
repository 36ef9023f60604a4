"""A team's policy (contract §11): its rules, the versions of its rule set, its standing grants,
and what each rule did per day. Below the core: it knows teams, never steps (a grant's
`from_step_id` and a tally's `step_id` are plain numbers)."""

from __future__ import annotations

from datetime import datetime

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from accounts.models import Team


class Effect(models.TextChoices):
    DENY = "deny"
    REQUIRE_APPROVAL = "require_approval"
    ALLOW = "allow"


class Mode(models.TextChoices):
    ENFORCE = "enforce"
    SHADOW = "shadow"


class RuleQuerySet(models.QuerySet["Rule"]):
    def for_team(self, team: Team) -> RuleQuerySet:
        return self.filter(team=team)

    def enabled(self) -> RuleQuerySet:
        return self.filter(enabled=True)


class Rule(models.Model):
    """One rule of a team's set: when `when` is true of a call of one of `tools` ("*": any),
    `effect` applies (`mode` enforce), or is only counted (shadow)."""

    Effect = Effect
    Mode = Mode

    # No lone index: rule_unique_name_per_team (team, name) serves every read by team.
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+", db_index=False)
    name = models.CharField(max_length=64)
    description = models.TextField(blank=True)
    tools = models.JSONField(default=list)  # tool names, or ["*"]
    when = models.TextField()
    effect = models.CharField(max_length=20, choices=Effect.choices)
    approvals = models.PositiveSmallIntegerField(default=1, validators=[MinValueValidator(1), MaxValueValidator(5)])
    approvers = models.CharField(max_length=40, blank=True)  # a §12 group; "" = none
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.ENFORCE)
    enabled = models.BooleanField(default=True)
    version = models.PositiveIntegerField(default=1)
    # The position in the set as it was saved: the order the set is listed and exported in.
    position = models.PositiveSmallIntegerField(default=0)
    updated_by = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = RuleQuerySet.as_manager()

    class Meta:
        ordering = ["position", "id"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="rule_unique_name_per_team"),
            models.CheckConstraint(condition=Q(effect__in=Effect.values), name="rule_effect_valid"),
            models.CheckConstraint(condition=Q(mode__in=Mode.values), name="rule_mode_valid"),
            models.CheckConstraint(condition=Q(approvals__gte=1, approvals__lte=5), name="rule_approvals_1_to_5"),
        ]

    def __str__(self) -> str:
        return f"{self.name}@v{self.version}"

    @property
    def enforced(self) -> bool:
        return self.enabled and self.mode == Mode.ENFORCE

    def names_tool(self, tool: str) -> bool:
        return "*" in self.tools or tool in self.tools

    def as_dict(self) -> dict[str, object]:
        """The rule as the API and `rules export` write it, and `rules_replace` reads it."""
        return {
            "name": self.name,
            "description": self.description,
            "tools": list(self.tools),
            "when": self.when,
            "effect": self.effect,
            "approvals": self.approvals,
            "approvers": self.approvers or None,
            "mode": self.mode,
            "enabled": self.enabled,
            "version": self.version,
            "updated_by": self.updated_by,
            "updated_at": self.updated_at.isoformat().replace("+00:00", "Z"),
        }


class RuleSetVersion(models.Model):
    """One saved version of a team's whole rule set. Append-only: old versions are kept. The
    latest one's `version` is the set's ETag."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+", db_index=False)
    version = models.PositiveIntegerField()
    rules = models.JSONField(default=list)  # [Rule.as_dict()], in the set's order
    made_by = models.CharField(max_length=200)
    made_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-version"]
        constraints = [models.UniqueConstraint(fields=["team", "version"], name="rulesetversion_unique_per_team")]


class Scope(models.TextChoices):
    RUN = "run"
    KEY = "key"
    TEAM = "team"


class GrantQuerySet(models.QuerySet["Grant"]):
    def for_team(self, team: Team) -> GrantQuerySet:
        return self.filter(team=team)

    def live(self, now: datetime | None = None) -> GrantQuerySet:
        return self.filter(revoked_at__isnull=True, expires_at__gt=now or timezone.now(), uses__lt=F("max_uses"))


class Grant(models.Model):
    """A reviewer's standing approval of calls like one they approved: calls of `tool` in
    `scope` for which `when` is true are granted without a human, until it expires, is revoked
    or has been used `max_uses` times."""

    Scope = Scope

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+", db_index=False)
    tool = models.CharField(max_length=100)
    when = models.TextField()
    scope = models.CharField(max_length=10, choices=Scope.choices)
    scope_value = models.CharField(max_length=200, blank=True)  # the run id, the API key's id, or ""
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    max_uses = models.PositiveSmallIntegerField(validators=[MinValueValidator(1), MaxValueValidator(1000)])
    uses = models.PositiveSmallIntegerField(default=0)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=200, blank=True)
    from_step_id = models.BigIntegerField(null=True, blank=True)

    objects = GrantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(scope__in=Scope.values), name="grant_scope_valid"),
            models.CheckConstraint(condition=Q(max_uses__gte=1, max_uses__lte=1000), name="grant_max_uses_1_to_1000"),
            # The use is a conditional UPDATE (uses < max_uses); this holds it whatever writes.
            models.CheckConstraint(condition=Q(uses__lte=F("max_uses")), name="grant_uses_within_max"),
            models.CheckConstraint(
                condition=Q(scope="team", scope_value="") | (~Q(scope="team") & ~Q(scope_value="")),
                name="grant_scope_value_matches_scope",
            ),
        ]
        indexes = [
            # The gate's read: a team's unrevoked grants of one tool (expiry and uses filtered).
            models.Index(
                fields=["team", "tool", "expires_at"], name="grant_live_idx", condition=Q(revoked_at__isnull=True)
            ),
            # /rules/grants/: a team's grants, newest first.
            models.Index(fields=["team", "-created_at", "-id"], name="grant_team_recent_idx"),
        ]

    def __str__(self) -> str:
        return f"grant:{self.pk}"

    def is_live(self, now: datetime) -> bool:
        return self.revoked_at is None and self.expires_at > now and self.uses < self.max_uses

    @property
    def uses_left(self) -> int:
        return max(0, self.max_uses - self.uses)

    def covers(self, *, tool: str, run_id: str, key_id: int | None) -> bool:
        """Whether the grant's tool and scope cover a call (its `when` aside)."""
        if tool != self.tool:
            return False
        if self.scope == Scope.RUN:
            return bool(run_id) and run_id == self.scope_value
        if self.scope == Scope.KEY:
            return key_id is not None and str(key_id) == self.scope_value
        return True


class RuleTally(models.Model):
    """What one rule did on one day (UTC): calls it matched while enforced, calls it would have
    matched in shadow, evaluations that failed, and steps it acted on. The /rules/ page's 30
    days and the metrics read these; the gate adds to them in its own transaction."""

    rule = models.ForeignKey(Rule, on_delete=models.CASCADE, related_name="tallies", db_index=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+", db_index=False)
    tool = models.CharField(max_length=100)
    effect = models.CharField(max_length=20, choices=Effect.choices)  # the rule's when it counted
    day = models.DateField()
    matched = models.PositiveIntegerField(default=0)
    would_match = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    acted = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            # The gate's upsert (envelopes.policy_acts.tallies_write) conflicts on these.
            models.UniqueConstraint(fields=["rule", "tool", "day", "effect"], name="ruletally_unique_rule_tool_day"),
        ]
        indexes = [
            # The metrics' policy counts: a team's tallies of one tool over a window of days.
            models.Index(fields=["team", "tool", "day"], name="ruletally_team_tool_day_idx"),
        ]


class RuleAct(models.Model):
    """A step a rule or grant acted on (refused, held or approved), for the rule's latest 50 and
    the metrics' `approvals.by`. Append-only."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False)
    rule = models.ForeignKey(Rule, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False)
    grant = models.ForeignKey(Grant, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False)
    name = models.CharField(max_length=64, blank=True)  # the rule's name then ("" for a grant)
    version = models.PositiveIntegerField(null=True, blank=True)
    tool = models.CharField(max_length=100)
    step_id = models.BigIntegerField()
    # denied_by_rule, approval_required_by_rule, approved_by_rule, approved_by_grant, granted_by_grant
    outcome = models.CharField(max_length=40)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # A rule's latest steps on /rules/.
            models.Index(
                fields=["rule", "-at", "-id"], name="ruleact_rule_recent_idx", condition=Q(rule__isnull=False)
            ),
            # A grant's uses on /rules/grants/.
            models.Index(fields=["grant", "-at"], name="ruleact_grant_recent_idx", condition=Q(grant__isnull=False)),
            # The metrics: a team's acts on one tool in a window.
            models.Index(fields=["team", "tool", "at"], name="ruleact_team_tool_at_idx"),
        ]
