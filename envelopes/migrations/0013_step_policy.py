"""What a hold by rule needs on the step (and the grant an attempt used) (contract §11: its approvals, its approver group, the
rule or grant that acted, §4 `policy`), and decisions that no human made: `reviewer` null and
`decided_by` naming the rule or grant, filled with the reviewer's username on the rows before."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.db.models import OuterRef, Q, Subquery


def decided_by_fill(apps, schema_editor):
    decision = apps.get_model("envelopes", "Decision")
    user = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    username = user._meta.get_field(getattr(user, "USERNAME_FIELD", "username")).attname
    decision.objects.filter(decided_by="").update(
        decided_by=Subquery(user.objects.filter(pk=OuterRef("reviewer_id")).values(username)[:1])
    )


class Migration(migrations.Migration):
    dependencies = [
        ("envelopes", "0012_team_apikey_out_decision_in"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="step",
            name="approvals_needed",
            field=models.PositiveSmallIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="step",
            name="approver_group",
            field=models.CharField(blank=True, max_length=40),
        ),
        migrations.AddField(
            model_name="step",
            name="policy",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="step",
            name="last_key_id",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="attempt",
            name="grant",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="decision",
            name="decided_by",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AlterField(
            model_name="decision",
            name="reviewer",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.RunPython(decided_by_fill, migrations.RunPython.noop, elidable=True),
        migrations.AddConstraint(
            model_name="decision",
            constraint=models.CheckConstraint(
                condition=Q(reviewer__isnull=False)
                | Q(decided_by__startswith="rule:")
                | Q(decided_by__startswith="grant:"),
                name="decision_reviewer_or_policy",
            ),
        ),
    ]
