from django.apps import AppConfig


class EnvelopesConfig(AppConfig):
    name = "envelopes"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import after_response  # noqa: F401  (connects its request signals)
