// Unit tests of the extension against a fake Pi and a fake host client.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, it } from "node:test";

import {
  ExecError,
  SandboxError,
  type RunEvent,
  type RunParams,
  type RunStatus,
  type Session,
  type SessionExec,
  type SessionExecEvent,
  type SessionExecResult,
} from "@roundtable-sandbox/client";

import { exportArtifacts } from "../src/artifacts.js";
import { ALLOW_ONCE, DENY, register, status, type HostClient, type SandboxRunParams } from "../src/extension.js";
import type { PiAPI, PiContext, PiTool, ToolResult } from "../src/pi.js";

const RUN = "0123456789abcdef0123456789abcdef";
const SID = "fedcba9876543210fedcba9876543210";

function session(over: Partial<Session> = {}): Session {
  return {
    id: SID, state: "running", ownerUid: 1000, memoryMb: 512, createdAt: "2026-12-07T00:00:00Z", expiresAt: "2026-12-07T01:00:00.000Z",
    lastUsedAt: "2026-12-07T00:00:00Z", execs: 0, execsTotal: 0, resumes: 0, ...over,
  };
}

function done(over: Partial<RunStatus> = {}): RunStatus {
  return { id: RUN, state: "finished", result: "ok", mode: "shell", ownerUid: 1000, createdAt: "2026-12-07T00:00:00Z", exitCode: 0, durationMs: 42, ...over };
}

// A fake host: records calls; each run's events are the given list.
class FakeHost implements HostClient {
  readonly socketPath = "/fake.sock";
  calls: string[] = [];
  started: RunParams[] = [];
  events: RunEvent[] = [];
  startError?: Error;
  approveError?: Error;
  role = "client";
  healthError?: Error;
  async health() {
    this.calls.push("health");
    if (this.healthError) throw this.healthError;
    return { status: "ok", version: "1.2.3", role: this.role, accepting: true };
  }
  async startRun(p: RunParams) {
    this.calls.push("start");
    if (this.startError) throw this.startError;
    this.started.push(p);
    return { id: RUN, state: p.network ? "awaiting_approval" : "queued", mode: "shell", ownerUid: 1000, createdAt: "2026-12-07T00:00:00Z" } as RunStatus;
  }
  async *runEvents(_id: string, opts?: { signal?: AbortSignal }) {
    this.calls.push("events");
    for (const ev of this.events) {
      if (opts?.signal?.aborted) throw opts.signal.reason;
      yield ev;
    }
  }
  async run() {
    this.calls.push("get");
    return done();
  }
  async approveRun() {
    this.calls.push("approve");
    if (this.approveError) throw this.approveError;
    return { id: RUN, state: "queued", mode: "shell", ownerUid: 1000, createdAt: "2026-12-07T00:00:00Z" } as RunStatus;
  }
  async cancelRun() {
    this.calls.push("cancel");
    return done({ result: "cancelled" });
  }

  // Sessions: each exec's events are execEvents; files is the session's /work.
  created: { project?: string; ttlSeconds?: number; network?: boolean }[] = [];
  execs: SessionExec[] = [];
  execEvents: SessionExecEvent[] = [];
  files = new Map<string, Buffer>();
  sessionError?: Error;
  async createSession(req: { project?: string; ttlSeconds?: number; network?: boolean }) {
    this.calls.push("session create");
    if (this.sessionError) throw this.sessionError;
    this.created.push(req);
    return session();
  }
  // As SandboxClient's execToEnd: the events in order, onEvent awaited.
  async execToEnd(id: string, x: SessionExec, opts?: { signal?: AbortSignal; onEvent?: (ev: SessionExecEvent) => void | Promise<void> }) {
    this.calls.push(`exec ${id}`);
    if (this.sessionError) throw this.sessionError;
    this.execs.push(x);
    const out: Buffer[] = [];
    const errOut: Buffer[] = [];
    for (const ev of this.execEvents) {
      if (opts?.signal?.aborted) throw opts.signal.reason;
      this.calls.push(`event ${ev.type}`);
      await opts?.onEvent?.(ev);
      if (ev.type === "stdout") out.push(Buffer.from(ev.data ?? "", "base64"));
      if (ev.type === "stderr") errOut.push(Buffer.from(ev.data ?? "", "base64"));
      if (ev.type === "error") throw new ExecError(ev.execId, ev.error ?? "");
      if (ev.type === "result" && ev.result) return { execId: ev.execId, result: ev.result, stdout: Buffer.concat(out), stderr: Buffer.concat(errOut) };
    }
    throw new ExecError("", "the exec's event stream ended without a result");
  }
  async approveExec(id: string, execId: string) {
    this.calls.push(`approve ${id} ${execId}`);
    if (this.approveError) throw this.approveError;
    return session();
  }
  async putFile(id: string, path: string, data: Uint8Array | string, mode?: number) {
    this.calls.push(`put ${id} ${path}${mode ? ` ${mode.toString(8)}` : ""}`);
    if (this.sessionError) throw this.sessionError;
    this.files.set(path, Buffer.from(data));
    return { path, size: Buffer.from(data).length };
  }
  async getFile(id: string, path: string) {
    this.calls.push(`get ${id} ${path}`);
    if (this.sessionError) throw this.sessionError;
    const data = this.files.get(path);
    if (!data) throw new SandboxError(404, "no such file");
    return { path, size: data.length, mode: 0o644, data };
  }
  async closeSession(id: string) {
    this.calls.push(`close ${id}`);
    if (this.sessionError) throw this.sessionError;
    return session({ state: "closing" });
  }
}

class FakePi implements PiAPI {
  tools = new Map<string, PiTool<SandboxRunParams>>();
  commands = new Map<string, (args: string, ctx: PiContext) => Promise<void>>();
  flags: Record<string, string> = {};
  registeredFlags: string[] = [];
  registerTool<P>(tool: PiTool<P>) {
    this.tools.set(tool.name, tool as unknown as PiTool<SandboxRunParams>);
  }
  registerCommand(name: string, o: { handler: (args: string, ctx: PiContext) => Promise<void> }) {
    this.commands.set(name, o.handler);
  }
  registerFlag(name: string) {
    this.registeredFlags.push(name);
  }
  getFlag(name: string) {
    return this.flags[name];
  }
}

let cwd: string;
let host: FakeHost;
let pi: FakePi;
let configs: { socketPath?: string; project?: string }[];
let asked: string[][];
let answer: string | undefined;

function ctx(hasUI: boolean): PiContext {
  return {
    hasUI,
    cwd,
    ui: {
      select: async (_t, options) => {
        asked.push(options);
        return answer;
      },
      notify: () => {},
    },
  };
}

async function call(params: SandboxRunParams, opts: { hasUI?: boolean; signal?: AbortSignal } = {}): Promise<ToolResult> {
  return pi.tools.get("sandbox_run")!.execute("call-1", params, opts.signal, undefined, ctx(opts.hasUI ?? true));
}

const out = (s: string): RunEvent => ({ seq: 1, type: "output", stream: "stdout", phase: "main", data: Buffer.from(s).toString("base64") });
const result = (st: RunStatus): RunEvent => ({ seq: 2, type: "result", status: st });

beforeEach(() => {
  cwd = mkdtempSync(join(tmpdir(), "pi-sandbox-"));
  host = new FakeHost();
  pi = new FakePi();
  configs = [];
  asked = [];
  answer = undefined;
  register(pi, (cfg) => {
    configs.push(cfg);
    return host;
  }, {});
});

afterEach(() => rmSync(cwd, { recursive: true, force: true }));

describe("registration", () => {
  it("registers sandbox_run with the seed's parameters, /sandbox-status and the two settings", () => {
    const tool = pi.tools.get("sandbox_run")!;
    const props = Object.keys((tool.parameters as unknown as { properties: Record<string, unknown> }).properties).sort();
    assert.deepEqual(props, ["args", "artifacts", "command", "executable", "network", "setup", "timeout_seconds"]);
    assert.ok(pi.commands.has("sandbox-status"));
    assert.deepEqual(pi.registeredFlags.sort(), ["sandbox-project", "sandbox-socket"]);
  });
});

describe("sandbox_run", () => {
  it("runs a shell command in the configured project and shows its output", async () => {
    pi.flags = { "sandbox-project": "demo", "sandbox-socket": "/s.sock" };
    host.events = [out("hi\n"), result(done({ stdout: "hi\n" }))];
    const r = await call({ command: "echo hi", timeout_seconds: 30 });
    assert.deepEqual(host.started, [{ project: "demo", command: "echo hi", timeoutSeconds: 30 }]);
    assert.deepEqual(configs.at(-1), { socketPath: "/s.sock", project: "demo" });
    assert.match(r.content[0].text, /run 0123456789abcdef0123456789abcdef: ok, exit code 0, 42 ms/);
    assert.match(r.content[0].text, /stdout:\nhi\n/);
  });

  it("runs argv mode and writes its artifact under the project's folder", async () => {
    const data = Buffer.from("report").toString("base64");
    host.events = [result(done({ mode: "argv", artifacts: [{ path: "out/r.json", size: 6, data }, { path: "gone", size: 0, error: "missing" }] }))];
    const r = await call({ executable: "python3", args: ["-c", "x"], artifacts: ["out/r.json", "gone"] });
    assert.deepEqual(host.started, [{ executable: "python3", args: ["-c", "x"], artifacts: ["out/r.json", "gone"] }]);
    assert.equal(readFileSync(join(cwd, "sandbox-output", RUN, "out", "r.json"), "utf8"), "report");
    assert.match(r.content[0].text, new RegExp(`artifact out/r.json \\(6 bytes\\) written to sandbox-output/${RUN}/out/r.json`));
    assert.match(r.content[0].text, /artifact gone: missing/);
    const details = r.details as { run: RunStatus };
    assert.equal(details.run.artifacts?.[0].data, undefined, "the details keep no artifact bytes");
  });

  it("passes setup commands through", async () => {
    host.events = [result(done())];
    await call({ command: "cowsay hi", setup: ["apt-get install -y cowsay"] });
    assert.deepEqual(host.started[0].setup, ["apt-get install -y cowsay"]);
  });

  it("fails closed without a UI when network is asked: nothing is started", async () => {
    await assert.rejects(call({ command: "curl x", network: true }, { hasUI: false }), /no UI/);
    assert.deepEqual(host.calls, []);
  });

  it("asks Deny / Allow once; Deny starts nothing", async () => {
    answer = DENY;
    await assert.rejects(call({ command: "curl x", network: true }), /denied by the user/);
    assert.deepEqual(asked, [[DENY, ALLOW_ONCE]]);
    assert.deepEqual(host.calls, []);
  });

  it("a dismissed question is a denial", async () => {
    answer = undefined;
    await assert.rejects(call({ command: "curl x", network: true }), /denied/);
    assert.deepEqual(host.calls, []);
  });

  it("Allow once starts the network run and approves it on the host", async () => {
    answer = ALLOW_ONCE;
    host.events = [result(done())];
    await call({ command: "curl x", network: true });
    assert.equal(host.started[0].network, true);
    assert.deepEqual(host.calls, ["start", "approve", "events"]);
  });

  it("cancels an allowed run the host will not let this user approve", async () => {
    answer = ALLOW_ONCE;
    host.approveError = new SandboxError(403, "forbidden");
    await assert.rejects(call({ command: "curl x", network: true }), /admin role/);
    assert.deepEqual(host.calls, ["start", "approve", "cancel"]);
  });

  it("is a tool error when the command fails, with its output", async () => {
    host.events = [result(done({ result: "failed", exitCode: 3, stderr: "boom" }))];
    await assert.rejects(call({ command: "exit 3" }), /failed, exit code 3[\s\S]*stderr:\nboom/);
  });

  it("says why the host refused a run", async () => {
    host.startError = new SandboxError(400, "timeoutSeconds must be 1..3600");
    await assert.rejects(call({ command: "true", timeout_seconds: 9999 }), /refused the run \(400\): timeoutSeconds must be 1\.\.3600/);
  });

  it("refuses both or neither of command and executable before the host hears of it", async () => {
    await assert.rejects(call({ command: "a", executable: "b" }), /exactly one/);
    await assert.rejects(call({}), /exactly one/);
    assert.deepEqual(host.calls, []);
  });

  it("cancels the run on the host when the tool call is aborted", async () => {
    const ctl = new AbortController();
    host.events = [out("a"), out("b")];
    const tool = pi.tools.get("sandbox_run")!;
    const r = tool.execute("c", { command: "sleep 9" }, ctl.signal, () => ctl.abort(), ctx(true));
    await assert.rejects(r, /cancelled/);
    assert.ok(host.calls.includes("cancel"));
  });
});

const x = (type: SessionExecEvent["type"], more: Partial<SessionExecEvent> = {}): SessionExecEvent => ({ type, execId: "x1", ...more });
const chunk = (type: "stdout" | "stderr", t: string) => x(type, { data: Buffer.from(t).toString("base64") });
const ended = (result: Partial<SessionExecResult> = {}) => x("result", { result: { exitCode: 0, startMs: 1, runMs: 2, ...result } });

async function tool(name: string, params: unknown, opts: { hasUI?: boolean; signal?: AbortSignal; onUpdate?: (r: ToolResult) => void } = {}): Promise<ToolResult> {
  const t = pi.tools.get(name);
  assert.ok(t, `${name} is registered`);
  return t.execute("call-1", params as SandboxRunParams, opts.signal, opts.onUpdate, ctx(opts.hasUI ?? true));
}

describe("session tools", () => {
  const props = (name: string) => Object.keys((pi.tools.get(name)!.parameters as unknown as { properties: Record<string, unknown> }).properties).sort();

  it("registers the MCP server's session tools with its parameters (start also takes network)", () => {
    assert.deepEqual(props("sandbox_session_start"), ["network", "ttl_seconds"]);
    assert.deepEqual(props("sandbox_exec"), ["args", "command", "cwd", "executable", "network", "root", "session_id", "stdin", "timeout_seconds"]);
    assert.deepEqual(props("sandbox_write_file"), ["content", "content_base64", "mode", "path", "session_id"]);
    assert.deepEqual(props("sandbox_read_file"), ["path", "session_id"]);
    assert.deepEqual(props("sandbox_session_close"), ["session_id"]);
  });

  it("start creates a session in the configured project and returns its id", async () => {
    pi.flags = { "sandbox-project": "demo" };
    const r = await tool("sandbox_session_start", { ttl_seconds: 600 });
    assert.deepEqual(host.created, [{ project: "demo", ttlSeconds: 600 }]);
    assert.equal(r.content[0].text, `session ${SID} started; it is removed at 2026-12-07T01:00:00Z unless closed before`);
    assert.equal((r.details as { session: Session }).session.id, SID);
  });

  it("start with network asks for a session that may ask for network, and asks no one yet", async () => {
    await tool("sandbox_session_start", { network: true }, { hasUI: false });
    assert.deepEqual(host.created, [{ network: true }]);
    assert.deepEqual(asked, []);
  });

  it("exec runs in the session given and shows the exit code and both streams", async () => {
    host.execEvents = [x("started"), chunk("stdout", "hel"), chunk("stderr", "warn\n"), chunk("stdout", "lo\n"), ended()];
    const updates: string[] = [];
    const r = await tool("sandbox_exec", { session_id: SID, command: "echo hello", cwd: "sub", stdin: "in", timeout_seconds: 30, root: true }, { onUpdate: (u) => updates.push(u.content[0].text) });
    assert.deepEqual(host.execs, [{ command: "echo hello", cwd: "sub", stdin: Buffer.from("in").toString("base64"), timeoutSeconds: 30, root: true }]);
    assert.ok(host.calls.includes(`exec ${SID}`));
    assert.equal(r.content[0].text, "exit code 0\n\nstdout:\nhello\n\n\nstderr:\nwarn\n");
    assert.deepEqual(updates, ["hel", "hello\n"]);
  });

  it("exec in argv mode passes executable and args", async () => {
    host.execEvents = [ended()];
    const r = await tool("sandbox_exec", { session_id: SID, executable: "cat", args: ["a.txt"] });
    assert.deepEqual(host.execs, [{ executable: "cat", args: ["a.txt"] }]);
    assert.match(r.content[0].text, /^exit code 0\n\nstdout: \(empty\)\n\nstderr: \(empty\)$/);
  });

  it("exec is a tool error on a non-zero exit, a timeout or a cut, with the output", async () => {
    host.execEvents = [chunk("stderr", "boom"), ended({ exitCode: 3 })];
    await assert.rejects(tool("sandbox_exec", { session_id: SID, command: "exit 3" }), /^Error: exit code 3[\s\S]*stderr:\nboom/);
    host.execEvents = [chunk("stdout", "x"), ended({ exitCode: 137, timedOut: true, stdoutTruncated: true, stdoutDropped: 99 })];
    await assert.rejects(tool("sandbox_exec", { session_id: SID, command: "yes" }), /timed out and killed \(exit code 137\)[\s\S]*stdout:\nx\n\[output cut at the host's bound: 99 bytes dropped\]/);
  });

  it("exec refuses both or neither of command and executable before the host hears of it", async () => {
    await assert.rejects(tool("sandbox_exec", { session_id: SID, command: "a", executable: "b" }), /exactly one/);
    await assert.rejects(tool("sandbox_exec", { session_id: SID }), /exactly one/);
    await assert.rejects(tool("sandbox_exec", { session_id: SID, command: "a", args: ["b"] }), /argv mode/);
    assert.deepEqual(host.calls, []);
  });

  it("a network exec fails closed without a UI: nothing is started", async () => {
    await assert.rejects(tool("sandbox_exec", { session_id: SID, command: "curl x", network: true }, { hasUI: false }), /no UI/);
    assert.deepEqual(host.calls, []);
  });

  it("a network exec asks Deny / Allow once; Deny or a dismissed question starts nothing", async () => {
    answer = DENY;
    await assert.rejects(tool("sandbox_exec", { session_id: SID, command: "curl x", network: true }), /denied by the user/);
    answer = undefined;
    await assert.rejects(tool("sandbox_exec", { session_id: SID, command: "curl x", network: true }), /denied by the user/);
    assert.deepEqual(asked, [[DENY, ALLOW_ONCE], [DENY, ALLOW_ONCE]]);
    assert.deepEqual(host.calls, []);
  });

  it("Allow once sends the network exec and approves it when the host asks, before it runs", async () => {
    answer = ALLOW_ONCE;
    host.execEvents = [x("approval", { execId: "x9" }), x("started", { execId: "x9" }), chunk("stdout", "ok"), ended()];
    const r = await tool("sandbox_exec", { session_id: SID, command: "curl x", network: true });
    assert.equal(host.execs[0].network, true);
    assert.deepEqual(host.calls, [`exec ${SID}`, "event approval", `approve ${SID} x9`, "event started", "event stdout", "event result"]);
    assert.match(r.content[0].text, /^exit code 0/);
  });

  it("an allowed network exec this user may not approve ends there: it never starts", async () => {
    answer = ALLOW_ONCE;
    host.approveError = new SandboxError(403, "forbidden");
    host.execEvents = [x("approval"), x("started"), ended()];
    await assert.rejects(tool("sandbox_exec", { session_id: SID, command: "curl x", network: true }), /admin role[\s\S]*did not start/);
    assert.deepEqual(host.calls, [`exec ${SID}`, "event approval", `approve ${SID} x1`]);
  });

  it("an exec the host ends with an error says the host's reason", async () => {
    answer = ALLOW_ONCE;
    host.execEvents = [x("approval"), x("error", { error: "no approval of the network exec in time (runs.approvalTimeoutSeconds); it did not start" })];
    await assert.rejects(tool("sandbox_exec", { session_id: SID, command: "curl x", network: true }), /could not run the command: no approval of the network exec in time/);
  });

  it("says why the host refused a session call, in the tool's own parameter names", async () => {
    host.sessionError = new SandboxError(400, "timeoutSeconds must be 1..3600");
    await assert.rejects(tool("sandbox_exec", { session_id: SID, command: "true", timeout_seconds: 9999 }), /could not run the command \(400\): timeout_seconds must be 1\.\.3600/);
    host.sessionError = new SandboxError(429, "too many live sessions (sessions.maxLive)");
    await assert.rejects(tool("sandbox_session_start", {}), /could not start the session \(429\): too many live sessions \(sessions.maxLive\)/);
    host.sessionError = new SandboxError(403, "forbidden");
    await assert.rejects(tool("sandbox_session_close", { session_id: SID }), /not one of its API clients/);
    host.sessionError = new SandboxError(0, "ENOENT on /fake.sock", { code: "ENOENT" });
    await assert.rejects(tool("sandbox_read_file", { session_id: SID, path: "a" }), /not reachable[\s\S]*\/sandbox-status/);
  });

  it("an aborted exec says it was cancelled", async () => {
    const ctl = new AbortController();
    host.execEvents = [x("started"), chunk("stdout", "a"), chunk("stdout", "b"), ended()];
    await assert.rejects(tool("sandbox_exec", { session_id: SID, command: "sleep 9" }, { signal: ctl.signal, onUpdate: () => ctl.abort() }), /exec cancelled/);
  });

  it("writes text or base64, reads it back as text or base64, and closes", async () => {
    assert.equal((await tool("sandbox_write_file", { session_id: SID, path: "a.txt", content: "hello", mode: 0o600 })).content[0].text, "wrote 5 bytes");
    assert.equal((await tool("sandbox_read_file", { session_id: SID, path: "a.txt" })).content[0].text, "hello");
    await tool("sandbox_write_file", { session_id: SID, path: "b.bin", content_base64: "AP8K" });
    assert.deepEqual([...host.files.get("b.bin")!], [0, 255, 10]);
    assert.equal((await tool("sandbox_read_file", { session_id: SID, path: "b.bin" })).content[0].text, "base64 (not UTF-8):\nAP8K");
    assert.equal((await tool("sandbox_session_close", { session_id: SID })).content[0].text, "session closed");
    assert.deepEqual(host.calls, [`put ${SID} a.txt 600`, `get ${SID} a.txt`, `put ${SID} b.bin`, `get ${SID} b.bin`, `close ${SID}`]);
  });

  it("write_file refuses content and content_base64 together, and what is not base64", async () => {
    await assert.rejects(tool("sandbox_write_file", { session_id: SID, path: "a", content: "x", content_base64: "eA==" }), /not both/);
    await assert.rejects(tool("sandbox_write_file", { session_id: SID, path: "a", content_base64: "%%%" }), /not base64/);
    assert.deepEqual(host.calls, []);
  });

  it("read_file shows the first 2000 lines of a long file and says so", async () => {
    host.files.set("long.txt", Buffer.from(Array.from({ length: 2500 }, (_, i) => `line ${i}`).join("\n")));
    const t = (await tool("sandbox_read_file", { session_id: SID, path: "long.txt" })).content[0].text;
    assert.ok(t.startsWith("line 0\n"));
    assert.ok(t.includes("line 1999\n") && !t.includes("line 2000"));
    assert.match(t, /\[first 2000 lines \/ 50 KB of \d+ bytes shown\]$/);
  });
});

describe("artifacts", () => {
  it("never writes into an existing run folder", async () => {
    mkdirSync(join(cwd, "sandbox-output", RUN), { recursive: true });
    await assert.rejects(exportArtifacts(cwd, RUN, [{ path: "a", size: 1, data: "eA==" }]), /EEXIST/);
  });

  it("refuses a sandbox-output that is a symlink", async () => {
    mkdirSync(join(cwd, "elsewhere"));
    symlinkSync(join(cwd, "elsewhere"), join(cwd, "sandbox-output"));
    await assert.rejects(exportArtifacts(cwd, RUN, [{ path: "a", size: 1, data: "eA==" }]), /not a directory/);
  });

  it("writes no path that leaves the run's folder", async () => {
    const got = await exportArtifacts(cwd, RUN, [{ path: "../x", size: 1, data: "eA==" }]);
    assert.deepEqual(got, [{ path: "../x", size: 1, error: "not a relative path under /output" }]);
  });
});

describe("/sandbox-status", () => {
  it("says a host that is not there, with the remedy", async () => {
    host.healthError = new SandboxError(0, "ENOENT on /fake.sock", { code: "ENOENT" });
    const lines = await status(host, {});
    assert.match(lines[0], /^✗ host not reachable/);
    assert.match(lines[1], /sandbox-host.socket/);
  });

  it("says a peer with no role, with the remedy, and probes nothing", async () => {
    host.role = "none";
    const lines = await status(host, {});
    assert.match(lines.join("\n"), /✗ role: none[\s\S]*access.clients/);
    assert.deepEqual(host.calls, ["health"]);
  });

  it("says the role and the toolbox a probe run found", async () => {
    host.events = [result(done())];
    const lines = await status(host, { project: "demo" });
    assert.deepEqual(lines.map((l) => l.slice(0, 1)), ["✓", "✓", "✓", "✓"]);
    assert.match(lines[3], /toolbox present/);
    assert.deepEqual(host.started, [{ executable: "true", timeoutSeconds: 60, project: "demo" }]);
  });

  it("says a toolbox that does not work, with the remedy", async () => {
    host.events = [result(done({ result: "error", error: "internal error" }))];
    const lines = await status(host, {});
    assert.match(lines.join("\n"), /✗ toolbox: a probe run ended error[\s\S]*toolbox build/);
  });
});
