import gc
import os
from importlib import import_module

from django.conf import settings
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

# What a web process loads once (Django, the apps and, through the URLconf, every view) lives as
# long as the process: it leaves the garbage collector's generations, so a full collection walks
# only what requests left behind. Without this, each full collection walks every object loaded
# at start, none of which can be garbage, and stops every thread of the worker meanwhile: the
# agent API's slowest requests (the figures: bench/README.md, "figures behind comments").
import_module(settings.ROOT_URLCONF)
gc.freeze()
