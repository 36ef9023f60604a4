"""Behind PgBouncer in transaction mode (HOLDPOINT_PGBOUNCER=true) the agent API works: migrate,
then gunicorn, with DATABASE_URL through a PgBouncer of the test's own whose two server
connections serve eight clients at once, so that every transaction may land on another server
connection (a prepared statement or a server-side cursor left on one then fails on the next)."""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from django.conf import settings

from tests.conftest import error_envelope
from tests.deploy.deployment import ROOT, base_environment, drop_database, free_port, fresh_database_url, gunicorn
from tests.deploy.deployment import manage as manage_checked

BEHIND_TLS = {"X-Forwarded-Proto": "https"}
CLIENTS = 8
ROUNDS = 6


def pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer") or next(
        (path for path in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(path)), None
    )
    if found is None:
        message = "pgbouncer is not installed (apt-get install -y --no-install-recommends pgbouncer)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message}; .ci/run installs it")
        pytest.skip(message)
    return found


@pytest.fixture
def pgbouncer() -> Iterator[int]:
    """A PgBouncer in transaction mode in front of the suite's PostgreSQL, on a free port."""
    conf = settings.DATABASES["default"]
    if conf["ENGINE"] == "django.db.backends.sqlite3":
        pytest.skip("PgBouncer pools PostgreSQL connections; the suite runs on SQLite")
    binary = pgbouncer_binary()
    user = conf.get("USER") or "postgres"
    password = conf.get("PASSWORD") or ""
    port = free_port()
    # PgBouncer refuses to run as root: as root it is told to switch to PostgreSQL's user, which
    # must read the configuration, so it lives in a directory of its own anyone may read.
    directory = Path(tempfile.mkdtemp(prefix="hp-pgbouncer-"))
    directory.chmod(0o755)
    (directory / "userlist.txt").write_text(f'"{user}" ""\n')
    server = f"host={conf.get('HOST') or '127.0.0.1'} port={conf.get('PORT') or 5432}"
    if password:
        server += f" user={user} password={password}"
    (directory / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = {server}\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {port}\n"
        "unix_socket_dir =\n"
        "auth_type = trust\n"
        f"auth_file = {directory / 'userlist.txt'}\n"
        "pool_mode = transaction\n"
        "default_pool_size = 2\n"
        "max_client_conn = 200\n"
        "ignore_startup_parameters = extra_float_digits\n"
    )
    for path in directory.iterdir():
        path.chmod(0o644)
    command = [binary, str(directory / "pgbouncer.ini")]
    if os.geteuid() == 0:
        command[1:1] = ["-u", _unprivileged_user()]
    log = (directory / "pgbouncer.log").open("w+b")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            assert process.poll() is None, f"pgbouncer exited {process.returncode}: {_tail(log)}"
            assert time.monotonic() < deadline, f"pgbouncer did not listen within 20 s: {_tail(log)}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield port
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=20)
        log.close()
        shutil.rmtree(directory, ignore_errors=True)


def _unprivileged_user() -> str:
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    pytest.fail("no unprivileged user for pgbouncer to run as")


def _tail(log) -> str:  # type: ignore[no-untyped-def]
    log.flush()
    log.seek(0)
    return log.read().decode(errors="replace")[-3000:]


def fingerprint(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def one_client(url: str, key: str, client: int) -> list[str]:
    """Each call of the agent API a runtime makes for a step, ROUNDS times, on one connection;
    returns what went wrong."""
    problems: list[str] = []
    headers = {**BEHIND_TLS, "Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        for n in range(ROUNDS):
            ref = f"pgb/{client}/{n}"
            path = f"/api/v1/steps/{quote(ref, safe='')}"
            first, second = fingerprint(f"{ref}/1"), fingerprint(f"{ref}/2")

            granted = http.post(f"{path}/attempts", json={"tool": "send_email", "input_fingerprint": first})
            if granted.status_code != 201 or granted.json()["attempt"] != 1:
                problems.append(f"{ref} first grant: {granted.status_code} {granted.text[:300]}")
                continue
            body = error_envelope(operation_ref=ref)
            key_header = {"Idempotency-Key": f"pgb-{client}-{n}"}
            stored = http.post("/api/v1/envelopes", json=body, headers=key_header)
            replayed = http.post("/api/v1/envelopes", json=body, headers=key_header)
            if stored.status_code != 201 or stored.json()["step"]["state"] != "needs_input":
                problems.append(f"{ref} ingest: {stored.status_code} {stored.text[:300]}")
            if replayed.headers.get("Idempotent-Replayed") != "true" or replayed.json() != stored.json():
                problems.append(f"{ref} replay: {replayed.status_code} {replayed.text[:300]}")
            refused = http.post(f"{path}/attempts", json={"tool": "send_email", "input_fingerprint": first})
            if refused.status_code != 409 or refused.json().get("code") != "identical_retry":
                problems.append(f"{ref} refusal: {refused.status_code} {refused.text[:300]}")
            fixed = http.post(f"{path}/attempts", json={"tool": "send_email", "input_fingerprint": second})
            if fixed.status_code != 201 or fixed.json()["attempt"] != 2:
                problems.append(f"{ref} second grant: {fixed.status_code} {fixed.text[:300]}")
            read = http.get(path)
            if read.status_code != 200 or read.json()["state"] != "in_progress":
                problems.append(f"{ref} read: {read.status_code} {read.text[:300]}")
            elif http.get(path, headers={"If-None-Match": read.headers["ETag"]}).status_code != 304:
                problems.append(f"{ref} conditional read was not 304")
    return problems


def test_the_agent_api_works_through_pgbouncer_in_transaction_mode(pgbouncer: int, tmp_path: Path) -> None:
    _direct, created = fresh_database_url(tmp_path)
    assert created is not None
    conf = settings.DATABASES["default"]
    password = f":{conf['PASSWORD']}" if conf.get("PASSWORD") else ""
    through_pgbouncer = f"postgres://{conf.get('USER') or 'postgres'}{password}@127.0.0.1:{pgbouncer}/{created}"
    try:
        env = base_environment(through_pgbouncer, HOLDPOINT_PGBOUNCER="true", HOLDPOINT_BEHIND_PROXY="true")
        manage_checked(env, "migrate", "--noinput")
        manage_checked(env, "createteam", "acme")
        key = manage_checked(env, "createapikey", "--team", "acme", "--name", "agent").stdout.strip().splitlines()[-1]

        with gunicorn(env, workers=2) as url, ThreadPoolExecutor(CLIENTS) as pool:
            results = list(pool.map(lambda client: one_client(url, key, client), range(CLIENTS)))
            problems = [problem for result in results for problem in result]
            assert problems == []

            # Every step, a page at a time by the list's cursor.
            headers = {**BEHIND_TLS, "Authorization": f"Bearer {key}"}
            refs: list[str] = []
            page = httpx.get(f"{url}/api/v1/steps", params={"limit": 10}, headers=headers).json()
            while True:
                refs += [step["operation_ref"] for step in page["results"]]
                if not page["next"]:
                    break
                # The link says https (the proxy's scheme); this test talks to gunicorn directly.
                page = httpx.get(url + httpx.URL(page["next"]).raw_path.decode(), headers=headers).json()
            assert sorted(refs) == sorted(f"pgb/{c}/{n}" for c in range(CLIENTS) for n in range(ROUNDS))

        # A command that reads whole tables (iterator(): a server-side cursor without the setting).
        audited = subprocess.run(
            [sys.executable, "manage.py", "verify_audit", "--seal"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert audited.returncode == 0, audited.stderr
    finally:
        drop_database(created)


def database_settings(**env: str) -> tuple[bool, object]:
    """DISABLE_SERVER_SIDE_CURSORS and psycopg's prepare_threshold as a fresh process reads them."""
    code = (
        "from django.conf import settings; d = settings.DATABASES['default']; "
        "print(d.get('DISABLE_SERVER_SIDE_CURSORS', False), d['OPTIONS'].get('prepare_threshold', 'unset'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"],
        cwd=ROOT,
        env={
            **base_environment("postgres://postgres@127.0.0.1:6432/holdpoint", **env),
            "DJANGO_SETTINGS_MODULE": "config.settings",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    cursors, threshold = done.stdout.split()
    return cursors == "True", threshold


def test_the_pgbouncer_switch_turns_off_server_side_cursors_and_prepared_statements() -> None:
    assert database_settings() == (False, "2")
    assert database_settings(HOLDPOINT_PGBOUNCER="true") == (True, "None")
    # PgBouncer 1.21+ with max_prepared_statements keeps them: asked for explicitly.
    assert database_settings(HOLDPOINT_PGBOUNCER="true", HOLDPOINT_DB_PREPARED_STATEMENTS="true") == (True, "2")
    # Off means none, not psycopg's own default of five.
    assert database_settings(HOLDPOINT_DB_PREPARED_STATEMENTS="false") == (False, "None")
