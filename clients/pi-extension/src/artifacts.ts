// Artifacts land in the project's folder: <cwd>/sandbox-output/<run id>/<path>,
// a folder made for the run (never an existing one), each file created
// new (never over a file, never through a symlink: the folders below the
// run's are this function's own, and the run's folder is refused when it
// exists; sandbox-output itself must be a real directory).
import { lstat, mkdir, open } from "node:fs/promises";
import { constants } from "node:fs";
import { dirname, join, relative, sep } from "node:path";

import type { RunArtifact } from "@roundtable-sandbox/client";

export const OUTPUT_DIR = "sandbox-output";

export interface Exported {
  path: string;
  size: number;
  /** Where it was written, relative to the project's folder; absent when it was not. */
  written?: string;
  /** Why it was not: the host's reason, or this side's. */
  error?: string;
}

/** safePath: a relative path of plain segments (the host checks it too). */
export function safePath(p: string): boolean {
  if (p === "" || p.startsWith("/") || p.includes("\\") || /[\x00-\x1f\x7f]/.test(p)) return false;
  return p.split("/").every((s) => s !== "" && s !== "." && s !== "..");
}

export async function exportArtifacts(cwd: string, runId: string, artifacts: RunArtifact[]): Promise<Exported[]> {
  const out: Exported[] = [];
  const todo = artifacts.filter((a) => !a.error && a.data !== undefined);
  let runDir: string | undefined;
  if (todo.length > 0) {
    const base = join(cwd, OUTPUT_DIR);
    await mkdir(base, { recursive: true });
    const st = await lstat(base);
    if (!st.isDirectory()) throw new Error(`${OUTPUT_DIR} in the project's folder is not a directory (a symlink?): artifacts not written`);
    if (!/^[0-9a-f]{32}$/.test(runId)) throw new Error("the run id is not 32 hex characters: artifacts not written");
    runDir = join(base, runId);
    await mkdir(runDir); // EEXIST: refused, never written into
  }
  for (const a of artifacts) {
    if (a.error || a.data === undefined) {
      out.push({ path: a.path, size: a.size, error: a.error ?? "no data" });
      continue;
    }
    if (!safePath(a.path)) {
      out.push({ path: a.path, size: a.size, error: "not a relative path under /output" });
      continue;
    }
    const dest = join(runDir!, ...a.path.split("/"));
    await mkdir(dirname(dest), { recursive: true });
    // O_EXCL: a new file; it refuses a symlink at the last component too.
    const fh = await open(dest, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o644);
    try {
      await fh.writeFile(Buffer.from(a.data, "base64"));
    } finally {
      await fh.close();
    }
    out.push({ path: a.path, size: a.size, written: relative(cwd, dest).split(sep).join("/") });
  }
  return out;
}
