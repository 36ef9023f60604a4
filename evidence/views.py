"""GET /.well-known/holdpoint/jwks.json: the public keys of every receipt key (RFC 8037)."""

from __future__ import annotations

import hashlib
import json

from django.http import HttpRequest, HttpResponse, HttpResponseNotModified
from django.views.decorators.http import require_GET

from .keys import jwks

# Keys are only ever added: a client caches the set, and fetches it again on an unknown kid.
MAX_AGE = 300


@require_GET
def jwks_view(request: HttpRequest) -> HttpResponse:
    body = json.dumps(jwks(), separators=(",", ":")).encode()
    etag = f'"{hashlib.sha256(body).hexdigest()[:32]}"'
    headers = {"Cache-Control": f"public, max-age={MAX_AGE}", "ETag": etag}
    if request.headers.get("If-None-Match") == etag:
        response: HttpResponse = HttpResponseNotModified(headers=headers)
        return response
    return HttpResponse(body, content_type="application/jwk-set+json", headers=headers)
