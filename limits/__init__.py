"""State that every web process must share and that `migrate` alone creates.

The API's per-key throttle windows (when no Redis cache is configured) and the claims of the
one-time form tokens live in real tables, not in Django's database cache: that cache's table
exists only after `createcachetable`, culls its oldest third beyond 300 entries (one-time
tokens and throttle counts with them), and increments by read-then-write.
"""
