from django.apps import AppConfig


class LimitsConfig(AppConfig):
    name = "limits"
    default_auto_field = "django.db.models.BigAutoField"
