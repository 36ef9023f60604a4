/**
 * A real Holdpoint for the live tests: gunicorn and a Celery worker (with beat) from the
 * repository's .venv, on a free port, over a fresh SQLite file and the embedded filesystem
 * broker; the team, the API key, a reviewer and the reviewer's token made through manage.py
 * in fresh processes, as an operator would.
 */

import { spawn, execFile, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

import { repoRoot } from "./paths.js";

const run = promisify(execFile);

export interface Live {
  url: string;
  team: string;
  apiKey: string;
  reviewerToken: string;
  viewerToken: string;
  root: string;
  env: NodeJS.ProcessEnv;
  python: string;
  manage(...args: string[]): Promise<string>;
  stop(): Promise<void>;
  logs(): string;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

function python(root: string): string {
  const venv = join(root, ".venv", "bin", "python");
  if (existsSync(venv)) return venv;
  throw new Error(`no ${venv}: run scripts/test --lint-only (it makes .venv) before the TypeScript tests`);
}

function lastLine(text: string, pattern: RegExp): string {
  const line = text.trim().split("\n").reverse().find((l) => pattern.test(l.trim()));
  if (!line) throw new Error(`expected a line matching ${pattern} in:\n${text}`);
  return line.trim();
}

async function stopGroup(child: ChildProcess, name: string): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  try {
    process.kill(-child.pid, "SIGTERM");
  } catch {
    return;
  }
  const timer = setTimeout(() => {
    try {
      if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
    } catch {
      // already gone
    }
    console.error(`${name} did not stop within 15 s; killed`);
  }, 15_000);
  await exited;
  clearTimeout(timer);
}

export async function startHoldpoint(): Promise<Live> {
  const root = repoRoot();
  const py = python(root);
  const dir = mkdtempSync(join(tmpdir(), "holdpoint-sdk-js-"));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  mkdirSync(join(root, "var", "broker", "queue"), { recursive: true });
  mkdirSync(join(root, "var", "broker", "processed"), { recursive: true });
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PATH: `${join(root, ".venv", "bin")}:${process.env["PATH"] ?? "/usr/bin:/bin"}`,
    VIRTUAL_ENV: join(root, ".venv"),
    DATABASE_URL: `sqlite:///${join(dir, "holdpoint.sqlite3")}`,
    CELERY_BROKER_URL: "filesystem://",
    CACHE_URL: "",
    DEBUG: "true",
    HOLDPOINT_BASE_URL: url,
    HOLDPOINT_PASSWORD: "sdk-js-reviewer-pw",
    LOG_LEVEL: "WARNING",
    PYTHONUNBUFFERED: "1",
  };
  const manage = async (...args: string[]): Promise<string> => {
    try {
      const { stdout } = await run(py, ["manage.py", ...args], { cwd: root, env, maxBuffer: 4 << 20 });
      return stdout;
    } catch (error) {
      const e = error as { stdout?: string; stderr?: string };
      throw new Error(`manage.py ${args.join(" ")} failed:\n${e.stdout ?? ""}${e.stderr ?? ""}`);
    }
  };

  await manage("migrate", "--noinput", "-v", "0");
  const webLog = join(dir, "web.log");
  const workerLog = join(dir, "worker.log");
  const web = spawn(py, ["-m", "gunicorn", "config.wsgi", "-b", `127.0.0.1:${port}`, "-w", "1", "--worker-class", "gthread", "--threads", "8", "--log-level", "warning"], {
    cwd: root,
    env,
    detached: true,
    stdio: ["ignore", openSync(webLog, "a"), openSync(webLog, "a")],
  });
  const worker = spawn(py, ["-m", "celery", "-A", "config", "-q", "worker", "--beat", "-l", "warning", "--concurrency", "1", "-s", join(dir, "celerybeat-schedule")], {
    cwd: root,
    env,
    detached: true,
    stdio: ["ignore", openSync(workerLog, "a"), openSync(workerLog, "a")],
  });
  const logs = (): string =>
    [webLog, workerLog].map((file) => `--- ${file}\n${existsSync(file) ? readFileSync(file, "utf8").slice(-4000) : ""}`).join("\n");
  const stop = async (): Promise<void> => {
    await Promise.all([stopGroup(web, "gunicorn"), stopGroup(worker, "celery")]);
    rmSync(dir, { recursive: true, force: true });
  };

  // The team, its key and its reviewers are made while the server starts.
  const team = "sdkjs";
  let credentials: [string, string, string];
  try {
    credentials = await (async (): Promise<[string, string, string]> => {
      await manage("createteam", team);
      const [key] = await Promise.all([
        manage("createapikey", "--team", team, "--name", "sdk-js"),
        manage("createreviewer", "rita", "--team", team, "--role", "reviewer"),
        manage("createreviewer", "vic", "--team", team, "--role", "viewer"),
      ]);
      // No command makes a reviewer token (users make them at /account/tokens/): the service
      // that page uses, run by manage.py shell in a fresh process.
      const tokens = await manage(
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model\n" +
          "from reviewers.services import reviewer_token_create\n" +
          "for name in ('rita', 'vic'):\n" +
          "    print(reviewer_token_create(user=get_user_model().objects.get(username=name), name='sdk-js').raw)",
      );
      const [rita, vic] = tokens.split("\n").map((l) => l.trim()).filter((l) => l.startsWith("hpr_"));
      if (!rita || !vic) throw new Error(`no reviewer tokens in:\n${tokens}`);
      return [lastLine(key, /^hp_/), rita, vic];
    })();
  } catch (error) {
    await stop();
    throw error;
  }
  const [apiKey, reviewerToken, viewerToken] = credentials;

  const deadline = Date.now() + 60_000;
  for (;;) {
    if (web.exitCode !== null || worker.exitCode !== null) {
      const text = logs();
      await stop();
      throw new Error(`Holdpoint did not start:\n${text}`);
    }
    try {
      const answer = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(1000) });
      if (answer.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      const text = logs();
      await stop();
      throw new Error(`Holdpoint did not answer /healthz within 60 s:\n${text}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  return { url, team, apiKey, reviewerToken, viewerToken, root, env, python: py, manage, stop, logs };
}
