from django.apps import AppConfig


class ReviewersConfig(AppConfig):
    name = "reviewers"
    default_auto_field = "django.db.models.BigAutoField"
