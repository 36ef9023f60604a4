from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from envelopes import events

        from .outbox import event_emit

        events.subscribe(event_emit)  # the webhook consumer of the core's event stream (§5)
