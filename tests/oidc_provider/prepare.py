"""Set the test provider's database up: `python -m tests.oidc_provider.prepare CONFIG_JSON`
(with HOLDPOINT_TEST_OIDC_DIR set): migrate, the users, and Holdpoint's client application with
its redirect URIs. Run again, it updates them."""

import json
import sys

import django


def main() -> None:
    spec = json.loads(sys.argv[1])
    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from oauth2_provider.models import Application

    call_command("migrate", verbosity=0)
    for username, password in spec["users"].items():
        user, _ = User.objects.get_or_create(username=username)
        user.set_password(password)
        user.save()
    Application.objects.filter(client_id=spec["client_id"]).delete()
    Application.objects.create(
        name="Holdpoint",
        client_id=spec["client_id"],
        client_secret=spec["client_secret"],
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=" ".join(spec["redirect_uris"]),
        algorithm=Application.RS256_ALGORITHM,
        skip_authorization=True,
    )


if __name__ == "__main__":
    main()
