"""Which memberships the single sign-on claim made (contract §12): those are replaced at every
sign-in, every other one stays. Existing memberships were all made in Holdpoint: `local`."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("accounts", "0001_team_apikey_membership")]

    operations = [
        migrations.AddField(
            model_name="membership",
            name="source",
            field=models.CharField(
                choices=[("local", "Local"), ("claim", "Claim")], default="local", max_length=8
            ),
        ),
        migrations.AddConstraint(
            model_name="membership",
            constraint=models.CheckConstraint(
                condition=models.Q(source__in=["local", "claim"]), name="membership_source_valid"
            ),
        ),
    ]
