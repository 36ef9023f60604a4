import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("accounts", "0001_team_apikey_membership"),
    ]

    operations = [
        migrations.CreateModel(
            name="TeamPolicyChain",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("audit_seq", models.PositiveIntegerField(default=0)),
                ("audit_head", models.CharField(blank=True, max_length=64)),
                (
                    "team",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="accounts.team"
                    ),
                ),
            ],
        ),
    ]
