"""Summarise a py-spy raw profile of the gunicorn workers: where the ingest's CPU goes.

    .venv/bin/py-spy record --pid <gunicorn master> --subprocesses --gil --rate 250 \\
        --duration 20 --format raw --output /tmp/ingest.txt      # while bench/run --soak 60 runs
    .venv/bin/python bench/spy_summary.py /tmp/ingest.txt

`--gil` keeps only the samples of a thread holding the GIL, i.e. running Python: waits on
PostgreSQL or Redis do not count. Two tables:

- by layer: each sample goes to the innermost frame that belongs to a known layer (psycopg, the
  ORM's SQL compiler, jsonschema, DRF, middleware, ...), so the layers add up to 100 %;
- by app function: the share of samples under each function of envelopes/ and webhooks/
  (inclusive, so nested functions overlap).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

# (layer, pattern on "function (path:line)"): the first layer that matches, from the leaf up.
LAYERS = [
    ("psycopg (send, fetch, adapt)", r"psycopg/"),
    ("redis client", r"redis/"),
    ("jsonschema validation", r"jsonschema/|referencing/|rpds"),
    ("redaction, instruction check", r"envelopes/redaction\.py"),
    ("ORM: SQL compiler", r"django/db/models/sql/|django/db/models/(expressions|lookups|query_utils)\.py"),
    ("ORM: querysets, fields", r"django/db/models/(query|fields|manager|deletion)"),
    ("ORM: model init, save", r"django/db/models/base\.py"),
    ("ORM: connection, transactions", r"django/db/(backends|transaction|utils)"),
    ("json encode/decode", r"json/(encoder|decoder|__init__)\.py"),
    ("DRF", r"rest_framework/"),
    ("middleware", r"django/middleware/|whitenoise/|csp/|django_htmx/|contrib/(sessions|auth|messages)/"),
    ("Django request/response, URLs", r"django/(core/handlers|http|urls|utils|views|dispatch)/"),
    ("gunicorn", r"gunicorn/"),
    ("envelopes/, webhooks/ (own code)", r"envelopes/|webhooks/|approvals/"),
    ("other Python (stdlib, threads)", r"."),
]
APP = re.compile(r"^(?P<function>[^ ]+) \((?P<path>(?:envelopes|webhooks|approvals|config)/[^:]+):\d+\)$")


def parse(path: str) -> list[tuple[list[str], int]]:
    stacks = []
    with open(path) as handle:
        for line in handle:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if stack and count.isdigit():
                stacks.append((stack.split(";"), int(count)))
    return stacks


def layer_of(frames: list[str], compiled: list[tuple[str, re.Pattern[str]]]) -> str:
    """The layer of the innermost frame that belongs to one (the catch-all comes last)."""
    for frame in reversed(frames):
        for name, pattern in compiled[:-1]:
            if pattern.search(frame):
                return name
    return compiled[-1][0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("raw", help="py-spy record --format raw output")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    stacks = parse(args.raw)
    total = sum(count for _, count in stacks)
    layers: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    compiled = [(name, re.compile(pattern)) for name, pattern in LAYERS]
    for frames, count in stacks:
        layers[layer_of(frames, compiled)] += count
        seen = set()
        for frame in frames:
            match = APP.match(frame)
            if match:
                name = f"{match['path']}:{match['function']}"
                if name not in seen:
                    seen.add(name)
                    functions[name] += count
    print(f"{total} samples holding the GIL\n\nby layer (innermost known frame):")
    for name, count in layers.most_common():
        print(f"  {100 * count / total:5.1f} %  {name}")
    print("\nby app function (inclusive):")
    for name, count in functions.most_common(args.top):
        print(f"  {100 * count / total:5.1f} %  {name}")


if __name__ == "__main__":
    main()
