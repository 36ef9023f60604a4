"""The rows a request writes point at their team and tool without a database constraint
(accounts.models.Team says why): each constraint dropped, nothing else changes (no index, no row).
A step's and an envelope's tool is RESTRICT, not PROTECT: a tool with steps still cannot be
deleted, but a team can, with its tools and steps (Django's collector; no SQL here for it)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0005_membership_away_delegate"),
        ("envelopes", "0022_idempotency_no_age_index"),
    ]

    operations = [
        migrations.AlterField(
            model_name="auditevent",
            name="team",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="accounts.team",
            ),
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="tool",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="envelopes.tool",
            ),
        ),
        migrations.AlterField(
            model_name="domainevent",
            name="team",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="accounts.team",
            ),
        ),
        migrations.AlterField(
            model_name="envelope",
            name="team",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="envelopes",
                to="accounts.team",
            ),
        ),
        migrations.AlterField(
            model_name="envelope",
            name="tool",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.RESTRICT,
                related_name="envelopes",
                to="envelopes.tool",
            ),
        ),
        migrations.AlterField(
            model_name="idempotencyrecord",
            name="team",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="accounts.team",
            ),
        ),
        migrations.AlterField(
            model_name="skippedresource",
            name="team",
            field=models.ForeignKey(
                db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name="+", to="accounts.team"
            ),
        ),
        migrations.AlterField(
            model_name="step",
            name="team",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="steps",
                to="accounts.team",
            ),
        ),
        migrations.AlterField(
            model_name="step",
            name="tool",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.RESTRICT,
                related_name="steps",
                to="envelopes.tool",
            ),
        ),
    ]
