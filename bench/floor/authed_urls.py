"""The authenticated floor: the floor's one INSERT, served the way any endpoint of the agent API
must be: the app's middleware, DRF, the API key looked up in the database (contract §4: every
call carries a key), the per-key throttle counted in the shared cache, the JSON parser and
renderer of the app. No validation, no step, no audit, no outbox.

What it costs above the bare floor is what the stack and the contract's authentication and
throttling cost before an ingest does any work of its own; bench/run measures it beside the two
others as the target "floor-authed".
"""

from __future__ import annotations

from django.urls import path
from django.utils import timezone
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .models import Row


class AuthedInsert(APIView):
    """REST_FRAMEWORK's defaults apply: API-key authentication, HasTeamKey, the key's throttle."""

    def post(self, request: Request) -> Response:
        body = request.data
        row = Row.objects.create(operation_ref=body["operation_ref"], body=body, received_at=timezone.now())
        return Response({"id": row.pk, "operation_ref": row.operation_ref}, status=201)


# Under /api/v1/ like the agent API, so that it takes the API's lane through the middleware.
urlpatterns = [path("api/v1/floor", AuthedInsert.as_view(), name="floor-authed-insert")]
