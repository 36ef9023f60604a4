from django.urls import URLPattern, URLResolver

app_name = "reviewers"

urlpatterns: list[URLPattern | URLResolver] = []
