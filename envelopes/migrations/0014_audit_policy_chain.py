"""A team's policy chain (its rules and grants, issue 25): links of no tool, of kind `policy`.
Dropping NOT NULL is a catalog change only: no table rewrite."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("envelopes", "0013_step_policy"),
    ]

    operations = [
        migrations.AlterField(
            model_name="auditevent",
            name="kind",
            field=models.CharField(
                choices=[
                    ("transition", "Transition"),
                    ("refusal", "Refusal"),
                    ("decision", "Decision"),
                    ("circuit", "Circuit"),
                    ("settings", "Settings"),
                    ("policy", "Policy"),
                ],
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="tool",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="envelopes.tool",
            ),
        ),
    ]
