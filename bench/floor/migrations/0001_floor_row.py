from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Row",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("operation_ref", models.CharField(max_length=200, unique=True)),
                ("body", models.JSONField()),
                ("received_at", models.DateTimeField()),
            ],
        ),
    ]
