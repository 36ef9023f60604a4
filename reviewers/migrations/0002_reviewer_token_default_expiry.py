"""Tokens expire after 90 days unless set otherwise (contract §12, v1.2). Active tokens made
"never" before it get 90 days from this migration, not from their creation: nothing a script
relies on stops working on the day of the upgrade."""

from datetime import timedelta

from django.db import migrations
from django.utils import timezone

DEFAULT_LIFETIME = timedelta(days=90)


def expire_open_ended_tokens(apps, schema_editor):
    token = apps.get_model("reviewers", "ReviewerToken")
    token.objects.filter(expires_at__isnull=True, revoked_at__isnull=True).update(
        expires_at=timezone.now() + DEFAULT_LIFETIME
    )


class Migration(migrations.Migration):
    dependencies = [("reviewers", "0001_reviewer_tokens")]

    operations = [migrations.RunPython(expire_open_ended_tokens, migrations.RunPython.noop)]
