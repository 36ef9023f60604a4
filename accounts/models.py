"""Who acts for a team: the team itself, its members' roles, and its agents' API keys.

At the bottom of the house: every app refers to these, and this app refers to none. The tables
keep the names they were created under (envelopes_team, envelopes_apikey, approvals_membership):
the models moved here in migration state only.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

# What full_clean lets a team's slug be (a SlugField of 64): other text names no team, and a
# lookup never sends it to the database (PostgreSQL refuses a NUL in a parameter).
TEAM_SLUG_RE = r"^[-a-zA-Z0-9_]{1,64}$"
GROUP_NAME_RE = r"^[a-z][a-z0-9-]{0,39}$"  # a reviewer group's name (contract §12)


class Team(models.Model):
    """A team: its keys, members, tools and everything they write.

    The rows a request writes (envelopes, steps, audit links, domain events, keyed answers,
    outbox messages, notices, watches, rule acts) point at their team, and at their tool, with no
    database constraint (`db_constraint=False`): PostgreSQL checks a constraint by locking the
    referenced row FOR KEY SHARE at every insert, so all of a team's concurrent requests would
    share that one row's lock (a new multixact each) and wait while anything holds it FOR UPDATE
    (the team's row: the audit seal, a tool's registration; the tool's: a halt). The ids come
    from the authenticated key and from rows the same transaction read, never from an agent;
    deleting a team or a tool goes through Django's collector (CASCADE; RESTRICT keeps a tool
    with steps), and a step's own rows keep their constraints to the step."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "envelopes_team"

    def __str__(self) -> str:
        return self.slug


class ApiKeyQuerySet(models.QuerySet["ApiKey"]):
    def active(self) -> ApiKeyQuerySet:
        return self.filter(revoked_at__isnull=True)


class ApiKey(models.Model):
    """An agent runtime's credential. Only a SHA-256 of the key is stored; the prefix is shown."""

    PREFIX_LENGTH = 11  # "hp_" + 8 characters

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, db_index=True)
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        db_table = "envelopes_apikey"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"

    @staticmethod
    def hash_key(raw: str) -> str:
        return hashlib.sha256(raw.encode()).hexdigest()

    @classmethod
    def generate(cls) -> str:
        return "hp_" + secrets.token_urlsafe(32)


class Membership(models.Model):
    class Role(models.TextChoices):
        VIEWER = "viewer"
        REVIEWER = "reviewer"
        ADMIN = "admin"

    class Source(models.TextChoices):
        LOCAL = "local"  # made in Holdpoint: createreviewer, the admin, the demo
        CLAIM = "claim"  # made from the single sign-on roles claim, replaced at every sign-in

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.LOCAL)
    # Delegation (contract §12, accounts.away): away while away_until is in the future; the
    # delegate, a reviewer or admin of the same team, then decides "for" this member.
    away_until = models.DateTimeField(null=True, blank=True)
    delegate = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="delegated_memberships"
    )

    class Meta:
        db_table = "approvals_membership"
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="membership_unique_user_team"),
            models.CheckConstraint(condition=Q(role__in=["viewer", "reviewer", "admin"]), name="membership_role_valid"),
            models.CheckConstraint(condition=Q(source__in=["local", "claim"]), name="membership_source_valid"),
            # Nobody stands in for themselves, and a delegate is named only for a time away.
            models.CheckConstraint(condition=~Q(delegate=F("user")), name="membership_delegate_not_self"),
            models.CheckConstraint(
                condition=Q(delegate__isnull=True) | Q(away_until__isnull=False), name="membership_delegate_when_away"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"

    @property
    def can_decide(self) -> bool:
        return self.role in (self.Role.REVIEWER, self.Role.ADMIN)

    @property
    def can_administer(self) -> bool:
        return self.role == self.Role.ADMIN

    def is_away(self, now: datetime) -> bool:
        return self.away_until is not None and self.away_until > now


class OidcIdentity(models.Model):
    """Who a user is at an OpenID Connect provider: its issuer and the `sub` it gives them. A
    sign-in finds its user by this pair only, never by a username or an email address, so an
    account at the provider never takes over a local one that happens to share its name."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identities")
    issuer = models.CharField(max_length=300)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="oidcidentity_unique_subject")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


class ReviewerGroup(models.Model):
    """A team's named group of reviewers and admins (contract §12): a tool's `approver_group`
    or a rule's `approvers` names one, and only its members may approve, reject or edit."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="reviewer_groups")
    name = models.CharField(max_length=40, validators=[RegexValidator(GROUP_NAME_RE)])
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="reviewergroup_unique_name_per_team")]

    def __str__(self) -> str:
        return f"{self.team}:{self.name}"


class GroupMembership(models.Model):
    """A user in a reviewer group; `source` as Membership's: a claim's are replaced at each
    sign-in, local ones stay."""

    group = models.ForeignKey(ReviewerGroup, on_delete=models.CASCADE, related_name="members")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="group_memberships")
    source = models.CharField(max_length=8, choices=Membership.Source.choices, default=Membership.Source.LOCAL)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["group", "user"], name="groupmembership_unique_user"),
            models.CheckConstraint(condition=Q(source__in=["local", "claim"]), name="groupmembership_source_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.group}"
