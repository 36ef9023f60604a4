"""The database cache's table (settings' CACHES without CACHE_URL), so that `migrate` alone makes
a working deployment: before, only `createcachetable` made it, and every API call answered 500
without it."""

from django.core.management.commands.createcachetable import Command as CreateCacheTable
from django.db import migrations

# config/settings.py's CACHES["default"]["LOCATION"] when CACHE_URL is not a redis:// URL.
CACHE_TABLE = "holdpoint_cache"


def create_cache_table(apps, schema_editor):
    # createcachetable's own code: the same columns and index, and nothing if the table exists.
    command = CreateCacheTable()
    command.verbosity = 0
    command.create_table(schema_editor.connection.alias, CACHE_TABLE, dry_run=False)


def drop_cache_table(apps, schema_editor):
    schema_editor.execute(f"DROP TABLE IF EXISTS {schema_editor.quote_name(CACHE_TABLE)}")


class Migration(migrations.Migration):
    dependencies = [("limits", "0001_throttle_windows_and_once_claims")]

    operations = [migrations.RunPython(create_cache_table, drop_cache_table)]
