// Unit tests of the extension against a fake Pi and a fake host client.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, it } from "node:test";

import { SandboxError, type RunEvent, type RunParams, type RunStatus } from "@roundtable-sandbox/client";

import { exportArtifacts } from "../src/artifacts.js";
import { ALLOW_ONCE, DENY, register, status, type HostClient, type SandboxRunParams } from "../src/extension.js";
import type { PiAPI, PiContext, PiTool, ToolResult } from "../src/pi.js";

const RUN = "0123456789abcdef0123456789abcdef";

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
