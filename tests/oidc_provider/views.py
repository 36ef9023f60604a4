"""The token endpoint, able to answer as a compromised or misconfigured provider would.

With tamper.json present, the ID token of the next answers is rewritten: claims changed or
dropped, then signed again with the provider's key or a foreign one (under the provider's key
id). Every ID token as first issued is appended to issued.jsonl, for the tests to read."""

import json
from typing import Any

import jwt
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from oauth2_provider.views import TokenView


class TamperingTokenView(TokenView):
    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = super().post(request, *args, **kwargs)
        if response.status_code != 200:
            return response
        body = json.loads(response.content)
        original = body.get("id_token")
        if not original:
            return response
        claims = jwt.decode(original, options={"verify_signature": False})
        with (settings.STATE_DIR / "issued.jsonl").open("a") as issued:
            issued.write(json.dumps(claims) + "\n")
        tamper_path = settings.STATE_DIR / "tamper.json"
        if not tamper_path.exists():
            return response
        tamper = json.loads(tamper_path.read_text())
        claims.update(tamper.get("claims", {}))
        for name in tamper.get("drop", []):
            claims.pop(name, None)
        key_file = "foreign-key.pem" if tamper.get("key") == "foreign" else "provider-key.pem"
        header = jwt.get_unverified_header(original)
        body["id_token"] = jwt.encode(
            claims, (settings.STATE_DIR / key_file).read_text(), algorithm="RS256", headers={"kid": header["kid"]}
        )
        forged = HttpResponse(json.dumps(body), content_type="application/json")
        forged["Cache-Control"] = "no-store"
        return forged
