from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from envelopes import api, health
from envelopes.apikit.problems import api_not_found
from evidence.views import jwks_view

api_v1 = [
    path("envelopes", api.EnvelopeIngestApi.as_view(), name="envelope-ingest"),
    path("steps", api.StepListApi.as_view(), name="step-list"),
    path("steps/<path:ref>/attempts", api.AttemptRequestApi.as_view(), name="attempt-request"),
    path("steps/<path:ref>/verification", api.VerificationReportApi.as_view(), name="verification-report"),
    path("steps/<path:ref>", api.StepDetailApi.as_view(), name="step-detail"),
    path("tools/<str:tool>/codes", api.ToolCodesApi.as_view(), name="tool-codes"),
    path("runs/<path:run_id>/skipped", api.RunSkippedApi.as_view(), name="run-skipped"),
]
api_fallback = [re_path(r"^api/(?P<rest>[\s\S]*)\Z", api_not_found)]

urlpatterns = [
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path(".well-known/holdpoint/jwks.json", jwks_view, name="jwks"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("metrics.urls")),
    path("", include("webhooks.urls")),
    path("", include("notifications.urls")),
    path("", include("reviewers.urls")),
    path("", include("rules.urls")),
    path("", include("approvals.urls")),
]
# Registered last, so the metrics app's API routes (included above) match first.
urlpatterns += api_fallback

# A database outage answers 503 with Retry-After instead of Django's 500 (config/outage.py).
handler500 = "config.outage.server_error"
