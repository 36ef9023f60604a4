"""The floor's one view: parse the JSON body, INSERT one row, answer 201 with its id."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from .models import Row


@csrf_exempt
def insert(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return JsonResponse({"detail": "POST only"}, status=405)
    try:
        body = json.loads(request.body)
        operation_ref = body["operation_ref"]
    except (ValueError, KeyError, TypeError):
        return JsonResponse({"detail": "a JSON object with an operation_ref"}, status=400)
    row = Row.objects.create(operation_ref=operation_ref, body=body, received_at=timezone.now())
    response = JsonResponse({"id": row.pk, "operation_ref": row.operation_ref}, status=201)
    # What CommonMiddleware adds in the real app; without it gunicorn would chunk the answer.
    response["Content-Length"] = str(len(response.content))
    return response
