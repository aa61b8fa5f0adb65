// The extension with the real client against the real host's router
// (pkg/host's TestTypeScriptClient serves it with fake Docker and systemd
// and sets SANDBOX_HOST_SOCKET); skipped without it. Pi is faked: the
// tool's execute and the command's handler are called as Pi calls them.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { SandboxClient } from "@roundtable-sandbox/client";

import { register, status, type SandboxRunParams } from "../src/extension.js";
import type { PiAPI, PiContext, PiTool } from "../src/pi.js";

const socketPath = process.env.SANDBOX_HOST_SOCKET;

describe("sandbox_run against the host", { skip: socketPath ? false : "SANDBOX_HOST_SOCKET is not set (pkg/host's TestTypeScriptClient sets it)" }, () => {
  let tool!: PiTool<SandboxRunParams>;
  const pi: PiAPI = {
    registerTool: (t) => {
      if (t.name === "sandbox_run") tool = t as unknown as PiTool<SandboxRunParams>;
    },
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

// The session tools need a host that can create a session (sessions.enabled,
// a container driver that attaches and pauses, the toolbox): pkg/host's
// router (fake Docker) cannot, so these skip there saying why, unless
// SANDBOX_SESSIONS=required.
describe("the session tools against the host", { skip: socketPath ? false : "SANDBOX_HOST_SOCKET is not set (pkg/host's TestTypeScriptClient sets it)" }, () => {
  const tools = new Map<string, PiTool<unknown>>();
  const pi: PiAPI = {
    registerTool: (t) => void tools.set(t.name, t as unknown as PiTool<unknown>),
    registerCommand: () => {},
    registerFlag: () => {},
    getFlag: (n) => (n === "sandbox-socket" ? socketPath : undefined),
  };
  register(pi, (cfg) => new SandboxClient({ socketPath: cfg.socketPath }), {});
  const ctx: PiContext = { hasUI: false, cwd: tmpdir(), ui: { select: async () => "Deny", notify: () => {} } };
  const call = (name: string, params: unknown) => tools.get(name)!.execute("s", params, undefined, undefined, ctx);
  let id = "";
  let why = "";

  before(async () => {
    try {
      const r = await call("sandbox_session_start", { ttl_seconds: 600 });
      id = /^session ([0-9a-f]{32}) started/.exec(r.content[0].text)?.[1] ?? "";
      assert.ok(id, r.content[0].text);
    } catch (err) {
      if (process.env.SANDBOX_SESSIONS === "required") throw err;
      why = `this host cannot create a session (${err instanceof Error ? err.message : String(err)}); the e2e Pi scenario (test/peers/pi-sandbox-run.mjs) runs sessions on the real host`;
    }
  });
  after(async () => {
    if (id) await new SandboxClient({ socketPath }).closeSession(id).catch(() => {});
  });

  it("an exec writes a file the next exec reads; write_file and read_file", async (t) => {
    if (!id) return t.skip(why);
    assert.match((await call("sandbox_exec", { session_id: id, command: "echo kept > note.txt" })).content[0].text, /^exit code 0/);
    assert.match((await call("sandbox_exec", { session_id: id, executable: "cat", args: ["note.txt"] })).content[0].text, /stdout:\nkept\n/);
    assert.equal((await call("sandbox_write_file", { session_id: id, path: "w.txt", content: "hi" })).content[0].text, "wrote 2 bytes");
    assert.equal((await call("sandbox_read_file", { session_id: id, path: "w.txt" })).content[0].text, "hi");
  });

  it("a network exec without a UI is refused before the host hears of it", async (t) => {
    if (!id) return t.skip(why);
    await assert.rejects(call("sandbox_exec", { session_id: id, command: "true", network: true }), /no UI/);
  });

  it("closes the session", async (t) => {
    if (!id) return t.skip(why);
    assert.equal((await call("sandbox_session_close", { session_id: id })).content[0].text, "session closed");
    id = "";
  });
});
