from django.apps import AppConfig


class EnvelopesConfig(AppConfig):
    name = "envelopes"
    default_auto_field = "django.db.models.BigAutoField"
