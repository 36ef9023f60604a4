from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from envelopes import events

        from .outbox import event_emit, event_fold

        # The webhook consumer of the core's event stream (§5); the hot path folds its INSERT into
        # the statement that writes the event.
        events.subscribe(event_emit, fold=event_fold)
