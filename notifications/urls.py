from django.urls import path

from . import views

app_name = "notifications"

urlpatterns = [
    path("notifications/", views.channels_page, name="channels"),
    path("notifications/channels", views.channel_create_view, name="channel-create"),
    path("notifications/channels/<int:pk>/test", views.channel_test_view, name="channel-test"),
    path("notifications/channels/<int:pk>/disable", views.channel_disable_view, name="channel-disable"),
    path("notifications/channels/<int:pk>/rotate", views.channel_rotate_view, name="channel-rotate"),
]
