from django.urls import path

from . import views

app_name = "webhooks"

urlpatterns = [
    path("webhooks/", views.dead_letters, name="dead-letters"),
    path("webhooks/messages/<int:pk>/redeliver", views.redeliver, name="redeliver"),
    path("webhooks/endpoints", views.endpoint_create_view, name="endpoint-create"),
    path("webhooks/endpoints/<int:pk>/rotate", views.endpoint_rotate_view, name="endpoint-rotate"),
    path("webhooks/endpoints/<int:pk>/disable", views.endpoint_disable_view, name="endpoint-disable"),
]
