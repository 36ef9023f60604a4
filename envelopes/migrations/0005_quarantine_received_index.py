# An index for the hourly purge of quarantined payloads (envelopes.retention).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("envelopes", "0004_domain_event_stream"),
    ]

    operations = [
        # quarantine_purge: received_at < cutoff ORDER BY received_at
        migrations.AddIndex(
            model_name="quarantine",
            index=models.Index(fields=["received_at"], name="quarantine_received_idx"),
        ),
    ]
