// The extension with the real client against the real host's router
// (pkg/host's TestTypeScriptClient serves it with fake Docker and systemd
// and sets SANDBOX_HOST_SOCKET); skipped without it. Pi is faked: the
// tool's execute and the command's handler are called as Pi calls them.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";

import { SandboxClient } from "@roundtable-sandbox/client";

import { register, status, type SandboxRunParams } from "../src/extension.js";
import type { PiAPI, PiContext, PiTool } from "../src/pi.js";

const socketPath = process.env.SANDBOX_HOST_SOCKET;

describe("sandbox_run against the host", { skip: socketPath ? false : "SANDBOX_HOST_SOCKET is not set (pkg/host's TestTypeScriptClient sets it)" }, () => {
  let tool!: PiTool<SandboxRunParams>;
  const pi: PiAPI = {
    registerTool: (t) => void (tool = t as unknown as PiTool<SandboxRunParams>),
    registerCommand: () => {},
    registerFlag: () => {},
    getFlag: (n) => (n === "sandbox-socket" ? socketPath : undefined),
  };
  register(pi, (cfg) => new SandboxClient({ socketPath: cfg.socketPath }), {});
  const client = new SandboxClient({ socketPath });
  const ctx = (cwd: string, hasUI: boolean): PiContext => ({ hasUI, cwd, ui: { select: async () => "Deny", notify: () => {} } });

  it("a shell run shows its output", async () => {
    const r = await tool.execute("1", { command: "echo hello" }, undefined, undefined, ctx(tmpdir(), false));
    assert.match(r.content[0].text, /: ok, exit code 0[\s\S]*stdout:\nhello\n/);
  });

  it("an argv run writes its artifact under the project's folder", async () => {
    const cwd = mkdtempSync(join(tmpdir(), "pi-int-"));
    try {
      const r = await tool.execute("2", { executable: "python3", args: ["-c", "1"], artifacts: ["r.txt"] }, undefined, undefined, ctx(cwd, false));
      const m = /written to (sandbox-output\/[0-9a-f]{32}\/r\.txt)/.exec(r.content[0].text);
      assert.ok(m, r.content[0].text);
      assert.equal(readFileSync(join(cwd, m[1]), "utf8"), "data:r.txt");
    } finally {
      rmSync(cwd, { recursive: true, force: true });
    }
  });

  it("a network run without a UI is refused and creates no run", async () => {
    const before = (await client.listRuns()).runs.length;
    await assert.rejects(tool.execute("3", { command: "curl x", network: true }, undefined, undefined, ctx(tmpdir(), false)), /no UI/);
    assert.equal((await client.listRuns()).runs.length, before);
  });

  it("a run the host refuses is a clear tool error", async () => {
    await assert.rejects(
      tool.execute("4", { command: "true", timeout_seconds: 999999 }, undefined, undefined, ctx(tmpdir(), false)),
      /the sandbox host refused the run \(400\): .*timeout/i,
    );
  });

  it("/sandbox-status: reachable, admin, toolbox present", async () => {
    const lines = await status(client, {});
    assert.deepEqual(lines.map((l) => l.slice(0, 1)), ["✓", "✓", "✓", "✓"], lines.join("\n"));
  });
});
