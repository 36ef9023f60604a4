import gc
import os
from importlib import import_module

from django.conf import settings
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

# What a web process loads once (Django, the apps and, through the URLconf, every view) lives as
# long as the process: it leaves the garbage collector's generations, so a full collection walks
# only what requests left behind. Without this, each full collection walked ~130,000 objects
# that can never be garbage and stopped every thread of the worker for 65-123 ms on the 2-core
# machine: the agent API's slowest requests (issue 14, bench/README.md).
import_module(settings.ROOT_URLCONF)
gc.freeze()
