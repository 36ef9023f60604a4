from django.urls import path

from .views import insert

urlpatterns = [path("floor", insert, name="floor-insert")]
