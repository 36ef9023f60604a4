"""The provider's claims: a user's `groups` are whatever claims.json says at the sign-in."""

import json
from typing import Any

from django.conf import settings
from oauth2_provider.oauth2_validators import OAuth2Validator


class ClaimsValidator(OAuth2Validator):
    # Claims not listed here are left out by django-oauth-toolkit.
    oidc_claim_scope = {**OAuth2Validator.oidc_claim_scope, "groups": "openid"}

    def get_additional_claims(self, request: Any) -> dict[str, Any]:
        path = settings.STATE_DIR / "claims.json"
        groups = json.loads(path.read_text()) if path.exists() else {}
        username = request.user.username
        return {
            "preferred_username": username,
            "email": f"{username}@idp.example",
            "email_verified": True,
            "groups": groups.get(username, []),
        }
