"""axe-core in the browser tests: `assert_accessible(page)` runs the vendored engine
(static/vendor/axe.min.js, see VENDORED.md) on the page as it is and fails on any violation.

The script is loaded from the live server's own static files, so the pages' CSP
(`script-src 'self'`) lets it run without loosening anything for the test."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page

AXE_URL = "/static/vendor/axe.min.js"

# Every rule axe runs by default (WCAG 2.0-2.2 A and AA, and its best practices); the
# experimental ones stay off, as axe ships them.
_RUN = """async () => {
  const results = await window.axe.run(document, {resultTypes: ["violations"]});
  return results.violations.map((violation) => ({
    id: violation.id,
    impact: violation.impact,
    help: violation.help,
    nodes: violation.nodes.map((node) => node.target.join(" ") + " :: " + node.failureSummary),
  }));
}"""


def axe_violations(page: Page) -> list[dict[str, Any]]:
    """The axe violations of the page's current document (htmx swaps included)."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.add_script_tag(url=AXE_URL)
        page.wait_for_function("() => typeof window.axe === 'object'")
    violations: list[dict[str, Any]] = page.evaluate(_RUN)
    return violations


def assert_accessible(page: Page) -> None:
    violations = axe_violations(page)
    assert violations == [], f"axe on {page.url}:\n" + "\n".join(
        f"- {v['id']} ({v['impact']}): {v['help']}\n    " + "\n    ".join(v["nodes"]) for v in violations
    )
