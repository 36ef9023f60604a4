from django.contrib.auth import views as auth_views
from django.urls import include, path

from .views import TamperingTokenView

urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("o/token/", TamperingTokenView.as_view(), name="token"),  # before the toolkit's own
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
]
