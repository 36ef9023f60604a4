from django.urls import path

from . import account, account_away, slack, views

app_name = "notifications"

urlpatterns = [
    path("notifications/", views.channels_page, name="channels"),
    path("notifications/channels", views.channel_create_view, name="channel-create"),
    path("notifications/channels/<int:pk>/test", views.channel_test_view, name="channel-test"),
    path("notifications/channels/<int:pk>/disable", views.channel_disable_view, name="channel-disable"),
    path("notifications/channels/<int:pk>/rotate", views.channel_rotate_view, name="channel-rotate"),
    # Contract §10: Slack's buttons, and the account page where a Slack member is linked.
    path("integrations/slack/actions", slack.slack_actions, name="slack-actions"),
    path("account/", account.account_page, name="account"),
    path("account/away/<str:team>", account_away.away_view, name="away"),
    path("account/slack/link", account.slack_link_view, name="slack-link"),
    path("account/slack/<int:pk>/unlink", account.slack_unlink_view, name="slack-unlink"),
]
