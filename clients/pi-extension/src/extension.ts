// sandbox_run and /sandbox-status on a roundtable-sandbox host: seed 004's
// tool (pi-sandbox-docker) with the host's approvals, brokers and
// journald in place of local Docker; and the session tools (sessions.ts). Configuration is the host's socket
// and the project's name, nothing else.
import { Type } from "typebox";

import { SandboxError, type RunEvent, type RunParams, type RunStatus } from "@roundtable-sandbox/client";

import { exportArtifacts, OUTPUT_DIR, type Exported } from "./artifacts.js";
import type { PiAPI, PiContext, ToolResult } from "./pi.js";
import { registerSessionTools, type SessionHost } from "./sessions.js";

/** What the extension needs of the host's client (SandboxClient has it). */
export interface HostClient extends SessionHost {
  readonly socketPath: string;
  health(opts?: { signal?: AbortSignal; timeoutMs?: number }): Promise<{ status: string; version: string; role: string; accepting: boolean }>;
  startRun(params: RunParams, opts?: { signal?: AbortSignal }): Promise<RunStatus>;
  runEvents(id: string, opts?: { signal?: AbortSignal }): AsyncIterable<RunEvent>;
  run(id: string, opts?: { signal?: AbortSignal }): Promise<RunStatus>;
  approveRun(id: string, opts?: { signal?: AbortSignal }): Promise<RunStatus>;
  cancelRun(id: string, opts?: { signal?: AbortSignal }): Promise<RunStatus>;
}

export interface Config {
  socketPath?: string;
  project?: string;
}

/** The seed's parameters, names and all (timeout_seconds). */
export interface SandboxRunParams {
  command?: string;
  executable?: string;
  args?: string[];
  setup?: string[];
  network?: boolean;
  timeout_seconds?: number;
  artifacts?: string[];
}

export const parameters = Type.Object(
  {
    command: Type.Optional(Type.String({ description: "Shell command (mutually exclusive with executable)" })),
    executable: Type.Optional(Type.String({ description: "Executable to run without a shell" })),
    args: Type.Optional(Type.Array(Type.String(), { description: "Arguments for the executable (argv mode)" })),
    setup: Type.Optional(
      Type.Array(Type.String(), { description: "Privileged shell commands run as root before the main command (e.g. package install)" }),
    ),
    network: Type.Optional(Type.Boolean({ description: "Enable network for THIS run only — requires human approval. Default false." })),
    timeout_seconds: Type.Optional(Type.Number({ description: "Timeout in seconds (default 120, max 3600)" })),
    artifacts: Type.Optional(Type.Array(Type.String(), { description: "Relative paths under /output to export to the host" })),
  },
  { additionalProperties: false },
);

export const DENY = "Deny";
export const ALLOW_ONCE = "Allow once";

/** The bounds of what a tool result shows (Pi's own: 50 KB, 2000 lines), the end kept. */
const MAX_BYTES = 50 * 1024;
const MAX_LINES = 2000;

export function tail(text: string): { text: string; cut: boolean } {
  let lines = text.split("\n");
  let cut = false;
  if (lines.length > MAX_LINES) {
    lines = lines.slice(-MAX_LINES);
    cut = true;
  }
  let out = lines.join("\n");
  if (Buffer.byteLength(out) > MAX_BYTES) {
    const b = Buffer.from(out);
    out = b.subarray(b.length - MAX_BYTES).toString("utf8").replace(/^\uFFFD+/, "");
    cut = true;
  }
  return { text: out, cut };
}

function toParams(p: SandboxRunParams, project?: string): RunParams {
  const r: RunParams = {};
  if (project) r.project = project;
  if (p.command !== undefined) r.command = p.command;
  if (p.executable !== undefined) r.executable = p.executable;
  if (p.args?.length) r.args = p.args;
  if (p.setup?.length) r.setup = p.setup;
  if (p.network) r.network = true;
  if (p.timeout_seconds !== undefined) r.timeoutSeconds = p.timeout_seconds;
  if (p.artifacts?.length) r.artifacts = p.artifacts;
  return r;
}

function what(p: SandboxRunParams): string {
  const s = p.command ?? [p.executable, ...(p.args ?? [])].join(" ");
  return s.length > 200 ? s.slice(0, 200) + "…" : s;
}

export interface RunDetails {
  run?: RunStatus;
  artifacts?: Exported[];
}

/** The result as the model reads it: the outcome line, stdout, stderr, the artifacts written. */
export function format(st: RunStatus, exported: Exported[]): string {
  const parts: string[] = [];
  let head = `run ${st.id}: ${st.result ?? st.state}`;
  if (st.exitCode !== undefined) head += `, exit code ${st.exitCode}`;
  if (st.failedSetup) head += ` (setup command ${st.failedSetup} failed)`;
  if (st.durationMs !== undefined) head += `, ${st.durationMs} ms`;
  if (st.error) head += `: ${st.error}`;
  parts.push(head);
  const cuts: string[] = [];
  if (st.stdoutTruncated) cuts.push(`stdout cut at the host's output bound${st.stdoutDroppedBytes ? `, ${st.stdoutDroppedBytes} bytes dropped` : ""}`);
  if (st.stderrTruncated) cuts.push(`stderr cut at the host's output bound${st.stderrDroppedBytes ? `, ${st.stderrDroppedBytes} bytes dropped` : ""}`);
  if (cuts.length) parts.push(`output cut: ${cuts.join("; ")}`);
  for (const [name, text] of [
    ["stdout", st.stdout],
    ["stderr", st.stderr],
  ] as const) {
    if (!text) continue;
    const t = tail(text);
    parts.push(`${name}${t.cut ? " (last 2000 lines / 50 KB shown)" : ""}:\n${t.text}`);
  }
  for (const a of exported) {
    parts.push(a.written ? `artifact ${a.path} (${a.size} bytes) written to ${a.written}` : `artifact ${a.path}: ${a.error}`);
  }
  return parts.join("\n\n");
}

function text(t: string, details: RunDetails = {}): ToolResult<RunDetails> {
  return { content: [{ type: "text", text: t }], details };
}

/** Why the host refused, said to the model. */
function refusal(err: unknown): Error {
  if (err instanceof SandboxError) {
    if (err.status === 0) return new Error(`the sandbox host is not reachable (${err.reason}): run /sandbox-status`);
    if (err.status === 403) return new Error("the sandbox host refused: this user is not one of its API clients (run /sandbox-status)");
    return new Error(`the sandbox host refused the run (${err.status}): ${err.reason}`);
  }
  return err instanceof Error ? err : new Error(String(err));
}

export function register(pi: PiAPI, client: (cfg: Config) => HostClient, env: NodeJS.ProcessEnv = process.env): void {
  pi.registerFlag("sandbox-socket", { type: "string", description: "the roundtable-sandbox host's socket (default /run/roundtable-sandbox/host.sock)" });
  pi.registerFlag("sandbox-project", { type: "string", description: "the project (a name from the host's runs.projects) mounted read-only at /workspace" });
  const config = (): Config => {
    const flag = (n: string) => {
      const v = pi.getFlag(n);
      return typeof v === "string" && v !== "" ? v : undefined;
    };
    return {
      socketPath: flag("sandbox-socket") ?? (env.ROUNDTABLE_SANDBOX_SOCKET || undefined),
      project: flag("sandbox-project") ?? (env.ROUNDTABLE_SANDBOX_PROJECT || undefined),
    };
  };

  pi.registerTool<SandboxRunParams>({
    name: "sandbox_run",
    label: "Sandbox run",
    description:
      "Run code in a fresh, disposable, offline Debian container on the roundtable-sandbox host instead of on this machine. " +
      "Exactly one of command (shell: pipelines, redirects, &&) or executable with args (no shell). " +
      "The project is mounted read-only at /workspace; write files to export under /output and name them in artifacts " +
      `(they are written to ${OUTPUT_DIR}/<run id>/ in the project's folder). ` +
      "setup commands run as root first (package installation) and do not see the project. " +
      "network: true asks the human to allow this one run. Output is bounded: the last 2000 lines / 50 KB of each stream are shown.",
    promptSnippet: "Run code in a disposable offline sandbox container (project read-only at /workspace, exports from /output)",
    promptGuidelines: ["Use sandbox_run to execute untrusted or generated code instead of running it on this machine."],
    parameters,
    async execute(_id, params, signal, onUpdate, ctx) {
      const cfg = config();
      const hasCommand = typeof params.command === "string" && params.command !== "";
      const hasExec = typeof params.executable === "string" && params.executable !== "";
      if (hasCommand === hasExec) throw new Error("sandbox_run needs exactly one of command or executable");
      if (hasCommand && params.args?.length) throw new Error("args go with executable (argv mode), not with command");
      if (params.network) {
        // No UI, no network: nothing is started.
        if (!ctx.hasUI) throw new Error("network was requested but there is no UI to ask the human (print or JSON mode): denied, nothing was started");
        const choice = await ctx.ui.select(`Allow network for this one sandbox run?\n${what(params)}`, [DENY, ALLOW_ONCE], { signal });
        if (choice !== ALLOW_ONCE) throw new Error("network denied by the user: nothing was started");
      }
      const c = client(cfg);
      let st: RunStatus;
      try {
        st = await c.startRun(toParams(params, cfg.project), { signal });
      } catch (err) {
        throw refusal(err);
      }
      const id = st.id;
      // The run is the host's from here: a cancelled tool call cancels it there.
      const cancel = () => void c.cancelRun(id).catch(() => {});
      signal?.addEventListener("abort", cancel, { once: true });
      try {
        if (params.network) {
          try {
            st = await c.approveRun(id, { signal });
          } catch (err) {
            await c.cancelRun(id).catch(() => {});
            if (err instanceof SandboxError && err.status === 403) {
              throw new Error("the user allowed network, but approving a run needs the host's admin role, which this user lacks: the run was cancelled");
            }
            throw refusal(err);
          }
        }
        let out = "";
        let final: RunStatus | undefined;
        for await (const ev of c.runEvents(id, { signal })) {
          if (ev.type === "output" && ev.data && ev.phase === "main") {
            out += Buffer.from(ev.data, "base64").toString("utf8");
            onUpdate?.(text(tail(out).text, { run: st }));
          } else if (ev.type === "result" && ev.status) {
            final = ev.status;
          }
        }
        final ??= await c.run(id, { signal });
        const exported = await exportArtifacts(ctx.cwd, id, final.artifacts ?? []);
        const stripped: RunStatus = { ...final, artifacts: final.artifacts?.map(({ data: _d, ...a }) => a) };
        const body = format(final, exported);
        // As Pi's bash: anything but ok (a non-zero exit included) is a tool error.
        if (final.result !== "ok") throw new Error(body);
        return text(body, { run: stripped, artifacts: exported });
      } catch (err) {
        if (signal?.aborted) throw new Error(`run ${id} cancelled`);
        throw err;
      } finally {
        signal?.removeEventListener("abort", cancel);
      }
    },
  });

  registerSessionTools(pi, () => client(config()), () => config().project, { deny: DENY, allowOnce: ALLOW_ONCE });

  pi.registerCommand("sandbox-status", {
    description: "Is the roundtable-sandbox host reachable, as which role, with its toolbox?",
    handler: async (_args, ctx) => {
      const lines = await status(client(config()), config());
      const bad = lines.some((l) => l.startsWith("✗"));
      if (ctx.hasUI) ctx.ui.notify(lines.join("\n"), bad ? "error" : "info");
      else console.log(lines.join("\n"));
    },
  });
}

/** /sandbox-status's lines: ✓ or ✗ each, a ✗ with what to do. */
export async function status(c: HostClient, cfg: Config): Promise<string[]> {
  const out: string[] = [];
  let h;
  try {
    h = await c.health({ timeoutMs: 10_000 });
  } catch (err) {
    const code = err instanceof SandboxError ? err.code : undefined;
    const fix =
      code === "ENOENT"
        ? "is roundtable-sandbox installed and sandbox-host.socket started? (systemctl status sandbox-host.socket), or set --sandbox-socket / ROUNDTABLE_SANDBOX_SOCKET"
        : code === "EACCES"
          ? "this user may not open the socket: add it to the host's client group (README, Running turns) and log in again"
          : "check `systemctl status sandbox-host` and `journalctl -u sandbox-host`";
    return [`✗ host not reachable at ${c.socketPath}: ${err instanceof Error ? err.message : String(err)}`, `  fix: ${fix}`];
  }
  out.push(`✓ host reachable at ${c.socketPath} (version ${h.version}${h.accepting ? "" : ", stopping"})`);
  if (h.role === "none") {
    out.push(`✗ role: none — this user may not run code`, `  fix: add its uid or group to access.clients in /etc/roundtable-sandbox/sandbox.yaml and restart sandbox-host`);
    return out;
  }
  out.push(`✓ role: ${h.role}${h.role === "admin" ? " (network runs can be approved from here)" : " (network runs need an admin's approval: sandbox-host run approve <id>)"}`);
  out.push(cfg.project ? `✓ project: ${cfg.project} (mounted read-only at /workspace)` : "✓ project: none (an empty /workspace; set --sandbox-project or ROUNDTABLE_SANDBOX_PROJECT)");
  // The API says nothing of the toolbox: a probe run says whether it works.
  try {
    const st = await probe(c, cfg);
    if (st.result === "ok") out.push(`✓ toolbox present (a probe run passed${st.durationMs !== undefined ? ` in ${st.durationMs} ms` : ""})`);
    else out.push(`✗ toolbox: a probe run ended ${st.result}${st.error ? `: ${st.error}` : ""}`, "  fix: run `sudo sandbox-host doctor`; build the toolbox with `sudo sandbox-host toolbox build`");
  } catch (err) {
    out.push(`✗ a probe run was refused: ${refusal(err).message}`, "  fix: run `sudo sandbox-host doctor` (runs.enabled, runs.projects)");
  }
  return out;
}

async function probe(c: HostClient, cfg: Config): Promise<RunStatus> {
  const st = await c.startRun({ executable: "true", timeoutSeconds: 60, ...(cfg.project ? { project: cfg.project } : {}) }, {});
  for await (const ev of c.runEvents(st.id)) {
    if (ev.type === "result" && ev.status) return ev.status;
  }
  return c.run(st.id);
}
