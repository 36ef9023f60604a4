"""Reviewers outside the dashboard: personal reviewer tokens and the reviewer API (contract §10)."""
