"""The dashboard's stable entry points (contract §7). `/tools/<tool>/` itself is the metrics
app's tool page; the halted tool's case lives beside it."""

from django.urls import path

from . import group_views, quarantine_views, similar_views, views

app_name = "approvals"

urlpatterns = [
    path("", views.queues, name="queues"),
    path("queue-counts", views.queue_counts, name="queue-counts"),
    path("search", views.search, name="search"),
    path("steps/<int:pk>/", views.step_detail, name="step"),
    path("steps/<int:pk>/decide", views.step_decide_view, name="step-decide"),
    path("steps/<int:pk>/approve-similar", similar_views.step_approve_similar, name="step-approve-similar"),
    path("steps/<int:pk>/grant-words", similar_views.grant_words, name="grant-words"),
    path("tools/<str:tool>/incident/", views.tool_incident, name="tool-incident"),
    path("tools/<str:tool>/resume", views.tool_resume, name="tool-resume"),
    path("tools/<str:tool>/cancel-held", views.tool_cancel_held, name="tool-cancel-held"),
    path("quarantine/", quarantine_views.quarantine_list, name="quarantine"),
    path("quarantine/<int:pk>/", quarantine_views.quarantine_detail, name="quarantine-detail"),
    path("teams/<str:team>/groups/", group_views.team_groups, name="team-groups"),
    path("keys/", views.api_keys, name="api-keys"),
    path("keys/<int:pk>/revoke", views.api_key_revoke, name="api-key-revoke"),
]
