# Indexes for the hourly purge of the webhook history (webhooks.retention).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0002_delivery_bookkeeping"),
    ]

    operations = [
        # delivered_messages_purge: status = 'delivered' AND delivered_at < cutoff ORDER BY delivered_at
        migrations.AddIndex(
            model_name="outboxmessage",
            index=models.Index(
                condition=models.Q(("status", "delivered")), fields=["delivered_at"], name="outbox_delivered_idx"
            ),
        ),
        # dead_letters_purge: status = 'dead' AND created_at < cutoff ORDER BY created_at
        migrations.AddIndex(
            model_name="outboxmessage",
            index=models.Index(condition=models.Q(("status", "dead")), fields=["created_at"], name="outbox_dead_created_idx"),
        ),
    ]
