from django.contrib import admin
from django.http import HttpRequest

from .models import ReceiptKey


@admin.register(ReceiptKey)
class ReceiptKeyAdmin(admin.ModelAdmin):
    """Which keys exist, read only; never the private seed (not even as a field to edit)."""

    list_display = ("kid", "generation", "created_at")
    fields = ("kid", "x", "generation", "created_at")
    readonly_fields = fields

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        # The admin filters on any field named in the query string (`?seed__startswith=`): one
        # character at a time, that would read the seed out.
        if lookup.split("__")[0] == "seed":
            return False
        return super().lookup_allowed(lookup, value, request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: ReceiptKey | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: ReceiptKey | None = None) -> bool:
        return False
