# Thin wrappers around the scripts; the scripts are the real commands.
#   make run                    # scripts/run: web server + worker + demo data
#   make test ARGS="-k approve"  # scripts/test: ruff and mypy, then pytest (ARGS go to pytest)
#   make lint                   # ruff and mypy alone
#   make bench                  # bench/run

ARGS ?=

.PHONY: run test lint bench

run:
	bash scripts/run

test:
	bash scripts/test $(ARGS)

lint:
	bash scripts/test --lint-only

bench:
	./bench/run $(ARGS)
