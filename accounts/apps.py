from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in
        from django.db.models.signals import post_delete, post_save

        from .auth import key_or_team_saved
        from .models import ApiKey, Team
        from .signin import on_user_logged_in

        # Every sign-in, password or single sign-on, marks its session (a reviewer token asks
        # for a recent one).
        user_logged_in.connect(on_user_logged_in, dispatch_uid="holdpoint-signed-in-at")

        # A process remembers active keys with their team (accounts.auth): a change to either
        # has it read them again.
        for model in (ApiKey, Team):
            post_save.connect(key_or_team_saved, sender=model, dispatch_uid=f"holdpoint-keys-{model.__name__}-saved")
            post_delete.connect(
                key_or_team_saved, sender=model, dispatch_uid=f"holdpoint-keys-{model.__name__}-deleted"
            )
