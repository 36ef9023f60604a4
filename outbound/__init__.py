"""What leaves the house: the SSRF guard (`ssrf`), Standard Webhooks signing (`signing`), the hard
per-try deadline (`deadline`), the vetted HTTP POST (`http`), the retry schedule (`retry`) and
the doorbell that wakes a worker (`doorbell`).

Webhooks and notifications both send through it; it imports neither (an import-linter
contract), so a new sender changes nothing here and no sender reaches into another's internals.
"""
