"""The Idempotency-Key table without its index on created_at: the hourly purge walks the primary
key instead (envelopes.purging), so a keyed call writes one index entry fewer."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("envelopes", "0021_idempotency_team_index"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="idempotencyrecord",
            name="idempotency_created_idx",
        ),
    ]
