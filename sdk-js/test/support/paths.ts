import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository's root (where manage.py is), found from this file wherever it is built. */
export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 8; i++) {
    if (existsSync(join(dir, "manage.py"))) return dir;
    dir = dirname(dir);
  }
  throw new Error("manage.py not found above " + fileURLToPath(import.meta.url));
}
