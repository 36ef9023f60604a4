from django.db import migrations, models


class Migration(migrations.Migration):
    """The W3C trace of the agent's calls (contract §13): on each attempt and envelope, and the
    latest on the step with the span its worker spans link to. Empty for every existing row; the
    database default stays, so a process of the release before (a rolling deploy) still inserts."""

    dependencies = [
        ("envelopes", "0015_decision_receipt_audit_export"),
    ]

    operations = [
        migrations.AddField(
            model_name="attempt",
            name="trace_id",
            field=models.CharField(blank=True, db_default="", default="", max_length=32),
        ),
        migrations.AddField(
            model_name="envelope",
            name="trace_id",
            field=models.CharField(blank=True, db_default="", default="", max_length=32),
        ),
        migrations.AddField(
            model_name="step",
            name="trace_id",
            field=models.CharField(blank=True, db_default="", default="", max_length=32),
        ),
        migrations.AddField(
            model_name="step",
            name="trace_parent_id",
            field=models.CharField(blank=True, db_default="", default="", max_length=16),
        ),
    ]
