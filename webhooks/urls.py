from django.urls import path

from . import views

app_name = "webhooks"

urlpatterns = [
    path("webhooks/", views.dead_letters, name="dead-letters"),
    path("webhooks/messages/<int:pk>/redeliver", views.redeliver, name="redeliver"),
]
