from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from envelopes import events

        from . import tasks  # noqa: F401 (registers the task the doorbell rings by name)
        from .consumer import event_consume

        events.subscribe(event_consume)  # held steps and halted tools become notices (§9)
