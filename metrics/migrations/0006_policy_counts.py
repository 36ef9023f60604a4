"""What rules and grants did (contract §11), counted by the hour like every other counter."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("metrics", "0005_team_in_accounts"),
    ]

    operations = [
        migrations.AddField(
            model_name="toolday",
            name="denied_by_rule",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="toolday",
            name="held_by_rule",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="toolday",
            name="approved_by_rule",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="toolday",
            name="approved_by_grant",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="toolday",
            name="granted_by_grant",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="toolhour",
            name="denied_by_rule",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="toolhour",
            name="held_by_rule",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="toolhour",
            name="approved_by_rule",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="toolhour",
            name="approved_by_grant",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="toolhour",
            name="granted_by_grant",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="tooltotal",
            name="denied_by_rule",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="tooltotal",
            name="held_by_rule",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="tooltotal",
            name="approved_by_rule",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="tooltotal",
            name="approved_by_grant",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="tooltotal",
            name="granted_by_grant",
            field=models.PositiveIntegerField(default=0),
        ),
    ]
