"""A real OpenID Connect provider for the single sign-on tests: django-oauth-toolkit in a tiny
Django project of its own, run in its own process by harness.py (never imported by Holdpoint)."""
