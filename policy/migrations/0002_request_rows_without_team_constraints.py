"""A rule's acts point at their team without a database constraint, as the core's rows do
(accounts.models.Team): the constraint dropped, nothing else changes."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0005_membership_away_delegate"),
        ("policy", "0001_rules_grants_tallies"),
    ]

    operations = [
        migrations.AlterField(
            model_name="ruleact",
            name="team",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="accounts.team",
            ),
        ),
    ]
