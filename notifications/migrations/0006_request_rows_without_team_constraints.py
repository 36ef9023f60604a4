"""Notices and watches point at their team without a database constraint, as the core's rows do
(accounts.models.Team): each constraint dropped, nothing else changes."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0005_membership_away_delegate"),
        ("notifications", "0005_team_in_accounts"),
    ]

    operations = [
        migrations.AlterField(
            model_name="notice",
            name="team",
            field=models.ForeignKey(
                db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name="+", to="accounts.team"
            ),
        ),
        migrations.AlterField(
            model_name="watch",
            name="team",
            field=models.ForeignKey(
                db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name="+", to="accounts.team"
            ),
        ),
    ]
