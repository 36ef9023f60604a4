from django.apps import AppConfig


class RulesConfig(AppConfig):
    """Managing a team's rules and standing grants (contract §11): the pages, the API, the
    `rules` command and the test against history. Above the core; the rules themselves, their
    evaluation and every write of them live in `policy`, below it."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "rules"
