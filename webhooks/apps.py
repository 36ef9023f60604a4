from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from envelopes import events

        from . import tasks  # noqa: F401 (registers the task the doorbell rings by name)
        from .outbox import event_emit, event_fold

        # The webhook consumer of the core's event stream (§5): one INSERT, which the core's
        # PostgreSQL writer folds into the statement that writes the event.
        events.subscribe(event_emit, fold=event_fold)
