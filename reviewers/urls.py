"""The reviewer API under /api/v1/teams/ (contract §10) and the tokens page. Included at "" in
config/urls.py, before the API's catch-all 404."""

from django.urls import URLPattern, URLResolver, path

from . import api, audit_api, away_api, views

app_name = "reviewers"

urlpatterns: list[URLPattern | URLResolver] = [
    path("api/v1/teams/<str:team>/queue", api.TeamQueueApi.as_view(), name="queue"),
    path("api/v1/teams/<str:team>/away", away_api.TeamAwayApi.as_view(), name="away"),
    path("api/v1/teams/<str:team>/audit", audit_api.TeamAuditExportApi.as_view(), name="audit-export"),
    # Before steps/<path:ref>: a path converter would take "/decisions" into the ref.
    path("api/v1/teams/<str:team>/steps/<path:ref>/decisions", api.StepDecisionApi.as_view(), name="decide"),
    path("api/v1/teams/<str:team>/steps/<path:ref>", api.TeamStepApi.as_view(), name="step"),
    path("account/tokens/", views.tokens, name="tokens"),
    path("account/tokens/<int:pk>/revoke", views.token_revoke, name="token-revoke"),
]
