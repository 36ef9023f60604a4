"""The dashboard shell every page app shares: login, htmx request type, rendering, team lookup, one-time tokens."""
