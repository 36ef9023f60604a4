#!/usr/bin/env bash
# What a foreign-key check on a shared row costs PostgreSQL: pgbench on two tables alike but for
# their constraints to one team row and one tool row, as a request's rows pointed at theirs before
# envelopes migration 0023 (accounts.models.Team). Each transaction inserts 4 rows (8 checks on
# the constrained table); synchronous_commit is off so that the CPU, not the disk, is measured.
#
#   bench/fk_check_cost.sh [--seconds 10] [--runs 3]
#
# Makes (drops and creates) the database hp_bench_fk on BENCH_PG_URL's server (default
# postgres://postgres@127.0.0.1:5432) and prints transactions per second, one client and 16,
# constrained and not, alternating.
set -euo pipefail

PG_URL="${BENCH_PG_URL:-postgres://postgres@127.0.0.1:5432}"
DB=hp_bench_fk
SECONDS_EACH=10
RUNS=3
while (($#)); do
    case $1 in
        --seconds) SECONDS_EACH=${2:?}; shift 2 ;;
        --runs) RUNS=${2:?}; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done

psql "$PG_URL/postgres" -q -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB" \
    -c "CREATE DATABASE $DB" -c "ALTER DATABASE $DB SET synchronous_commit = off"
psql "$PG_URL/$DB" -q <<'SQL'
CREATE TABLE team (id int PRIMARY KEY, slug text);
CREATE TABLE tool (id int PRIMARY KEY, name text);
INSERT INTO team VALUES (1, 'acme');
INSERT INTO tool VALUES (1, 'send_email');
-- Django's constraints are DEFERRABLE INITIALLY DEFERRED: checked at COMMIT.
CREATE TABLE row_constrained (id bigserial PRIMARY KEY,
    team_id int NOT NULL REFERENCES team (id) DEFERRABLE INITIALLY DEFERRED,
    tool_id int NOT NULL REFERENCES tool (id) DEFERRABLE INITIALLY DEFERRED, body text);
CREATE TABLE row_unconstrained (id bigserial PRIMARY KEY, team_id int NOT NULL, tool_id int NOT NULL, body text);
CREATE INDEX ON row_constrained (team_id, id);
CREATE INDEX ON row_constrained (tool_id, id);
CREATE INDEX ON row_unconstrained (team_id, id);
CREATE INDEX ON row_unconstrained (tool_id, id);
SQL

scripts=$(mktemp -d)
trap 'rm -rf "$scripts"' EXIT
for table in row_constrained row_unconstrained; do
    {
        echo "BEGIN;"
        for _ in 1 2 3 4; do echo "INSERT INTO $table (team_id, tool_id, body) VALUES (1, 1, repeat('x', 300));"; done
        echo "COMMIT;"
    } > "$scripts/$table.sql"
done

for clients in 1 16; do
    for ((run = 1; run <= RUNS; run++)); do
        for table in row_constrained row_unconstrained; do
            tps=$(pgbench "$PG_URL/$DB" -n -c "$clients" -j 2 -T "$SECONDS_EACH" -M prepared -f "$scripts/$table.sql" 2>&1 |
                awk '/^tps/ {print $3}')
            printf '%2d client(s)  run %d  %-18s %10.0f transactions/s\n' "$clients" "$run" "$table" "$tps"
        done
    done
done
