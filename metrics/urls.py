"""Included at the site root (config/urls.py), before the dashboard's routes."""

from django.urls import path

from . import api, views

urlpatterns = [
    path("api/v1/tools/<str:tool>/metrics", api.ToolMetricsApi.as_view(), name="tool-metrics"),
    path("metrics", views.prometheus_metrics, name="metrics-prometheus"),
    path("overview/", views.overview_page, name="metrics-overview"),
    path("tools/<str:tool>/", views.tool_page, name="metrics-tool"),
    path("tools/<str:tool>/codes", views.code_save, name="metrics-code-save"),
    path("tools/<str:tool>/settings", views.tool_settings_save, name="metrics-tool-settings"),
]
