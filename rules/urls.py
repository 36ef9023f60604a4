"""The rules API under /api/v1/teams/{team}/ and the /rules/ pages. Included at "" in
config/urls.py, before the API's catch-all 404."""

from django.urls import URLPattern, URLResolver, path

from . import api, views

app_name = "rules"

urlpatterns: list[URLPattern | URLResolver] = [
    path("api/v1/teams/<str:team>/rules", api.TeamRulesApi.as_view(), name="api-rules"),
    path("api/v1/teams/<str:team>/rules/test", api.TeamRulesTestApi.as_view(), name="api-rules-test"),
    path("api/v1/teams/<str:team>/grants", api.TeamGrantsApi.as_view(), name="api-grants"),
    path("api/v1/teams/<str:team>/grants/<int:pk>", api.TeamGrantApi.as_view(), name="api-grant"),
    path("rules/", views.rules_page, name="page"),
    path("rules/edit", views.rules_edit, name="edit"),
    path("rules/version", views.rules_version, name="version"),
    path("rules/grants/", views.grants_page, name="grants"),
    path("rules/grants/<int:pk>/revoke", views.grant_revoke_view, name="grant-revoke"),
]
