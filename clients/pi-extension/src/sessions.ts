// The session tools: a sandbox that lives across tool calls, beside the
// disposable sandbox_run. Names, parameters and results are the MCP
// server's (pkg/runmcp/session.go; docs/api.md, Sessions), so a model
// meets the same tools through either door. One addition: start takes
// network, since only a session created with it can later be granted a
// network exec (each one asked of the human, as sandbox_run's network).
import { Type } from "typebox";

import { ExecError, SandboxError, type Session, type SessionExec, type SessionExecEvent, type SessionExecResult, type SessionFile, type SessionFileData } from "@roundtable-sandbox/client";

import type { PiAPI, ToolResult } from "./pi.js";

/** What the session tools need of the host's client (SandboxClient has it). */
export interface SessionHost {
  createSession(req: { project?: string; ttlSeconds?: number; network?: boolean }, opts?: { signal?: AbortSignal }): Promise<Session>;
  execToEnd(
    id: string,
    req: SessionExec,
    opts?: { signal?: AbortSignal; onEvent?: (ev: SessionExecEvent) => void | Promise<void> },
  ): Promise<{ execId: string; result: SessionExecResult; stdout: Buffer; stderr: Buffer }>;
  approveExec(id: string, execId: string, opts?: { signal?: AbortSignal }): Promise<Session>;
  putFile(id: string, path: string, data: Uint8Array | string, mode?: number, opts?: { signal?: AbortSignal }): Promise<SessionFile>;
  getFile(id: string, path: string, opts?: { signal?: AbortSignal }): Promise<SessionFileData>;
  closeSession(id: string, opts?: { signal?: AbortSignal }): Promise<Session>;
}

export const SESSION_TOOLS = ["sandbox_session_start", "sandbox_exec", "sandbox_write_file", "sandbox_read_file", "sandbox_session_close"] as const;

const sessionId = Type.String({ description: "the id sandbox_session_start returned" });
const sessionPath = Type.String({ description: "relative to /work, or under /output or /tmp" });

export const startParameters = Type.Object(
  {
    ttl_seconds: Type.Optional(Type.Number({ description: "remove the session after this many seconds (default and most: the host's sessions.ttlSeconds)" })),
    network: Type.Optional(
      Type.Boolean({ description: "let this session's execs ask for network (each such exec still asks the human). Default false." }),
    ),
  },
  { additionalProperties: false },
);

export const execParameters = Type.Object(
  {
    session_id: sessionId,
    command: Type.Optional(Type.String({ description: "Shell command (mutually exclusive with executable)" })),
    executable: Type.Optional(Type.String({ description: "Executable to run without a shell" })),
    args: Type.Optional(Type.Array(Type.String(), { description: "Arguments for the executable (argv mode)" })),
    cwd: Type.Optional(Type.String({ description: "Working directory, relative to /work (default) or under /output or /tmp" })),
    stdin: Type.Optional(Type.String({ description: "Standard input (at most 256 KiB)" })),
    timeout_seconds: Type.Optional(Type.Number({ description: "Timeout in seconds (default 120, max 3600)" })),
    root: Type.Optional(Type.Boolean({ description: "Run as root with a package installer's capabilities" })),
    network: Type.Optional(
      Type.Boolean({ description: "Network for THIS exec only (a session started with network) — requires human approval. Default false." }),
    ),
  },
  { additionalProperties: false },
);

export const writeFileParameters = Type.Object(
  {
    session_id: sessionId,
    path: sessionPath,
    content: Type.Optional(Type.String({ description: "the file's text" })),
    content_base64: Type.Optional(Type.String({ description: "the file's bytes, base64 (instead of content)" })),
    mode: Type.Optional(Type.Number({ description: "permission bits, default 0644 (420)" })),
  },
  { additionalProperties: false },
);

export const readFileParameters = Type.Object({ session_id: sessionId, path: sessionPath }, { additionalProperties: false });
export const closeParameters = Type.Object({ session_id: sessionId }, { additionalProperties: false });

export interface StartParams {
  ttl_seconds?: number;
  network?: boolean;
}
export interface ExecParams {
  session_id: string;
  command?: string;
  executable?: string;
  args?: string[];
  cwd?: string;
  stdin?: string;
  timeout_seconds?: number;
  root?: boolean;
  network?: boolean;
}
export interface WriteFileParams {
  session_id: string;
  path: string;
  content?: string;
  content_base64?: string;
  mode?: number;
}
export interface ReadFileParams {
  session_id: string;
  path: string;
}
export interface CloseParams {
  session_id: string;
}

export interface SessionDetails {
  session?: Session;
  execId?: string;
  result?: SessionExecResult;
  size?: number;
}

/** The bounds of what a tool result shows (Pi's own: 50 KB, 2000 lines). */
const MAX_BYTES = 50 * 1024;
const MAX_LINES = 2000;

/** The last lines of an exec's stream (where its errors are). */
function tailOf(text: string): { text: string; cut: boolean } {
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

/** The first lines of a file read (as Pi's read tool shows a file). */
function headOf(text: string): { text: string; cut: boolean } {
  let lines = text.split("\n");
  let cut = false;
  if (lines.length > MAX_LINES) {
    lines = lines.slice(0, MAX_LINES);
    cut = true;
  }
  let out = lines.join("\n");
  if (Buffer.byteLength(out) > MAX_BYTES) {
    out = Buffer.from(out).subarray(0, MAX_BYTES).toString("utf8").replace(/\uFFFD+$/, "");
    cut = true;
  }
  return { text: out, cut };
}

function text(t: string, details: SessionDetails = {}): ToolResult<SessionDetails> {
  return { content: [{ type: "text", text: t }], details };
}

/** Why a session call failed, said to the model: the host's reason for what it can fix, generic otherwise (pkg/runmcp's sessionError). */
export function sessionRefusal(what: string, err: unknown): Error {
  if (err instanceof SandboxError) {
    if (err.status === 0) return new Error(`the sandbox host is not reachable (${err.reason}): run /sandbox-status`);
    if (err.status === 403) return new Error("the sandbox host refused: this user is not one of its API clients (run /sandbox-status)");
    const reason = err.reason.replaceAll("timeoutSeconds", "timeout_seconds").replaceAll("ttlSeconds", "ttl_seconds");
    if ((err.status >= 400 && err.status < 500) || err.status === 501) return new Error(`the sandbox host could not ${what} (${err.status}): ${cap(reason, 500)}`);
    return new Error(`the sandbox host could not ${what} (${err.status}): ${cap(reason, 200)}; its log has details (journalctl -u sandbox-host)`);
  }
  if (err instanceof ExecError) return new Error(`the sandbox host could not ${what}: ${cap(err.reason, 500)}`);
  return err instanceof Error ? err : new Error(String(err));
}

function cap(s: string, n: number): string {
  return s.length > n ? s.slice(0, n) + "…" : s;
}

/** An exec's result as the model reads it (pkg/runmcp's sandbox_exec text): the outcome line, then each stream. */
export function formatExec(res: SessionExecResult, stdout: string, stderr: string): string {
  let head: string;
  if (res.timedOut) head = `timed out and killed (exit code ${res.exitCode})`;
  else if (res.cancelled) head = `cancelled and killed (exit code ${res.exitCode})`;
  else if (res.signal) head = `killed by signal ${res.signal} (exit code ${res.exitCode})`;
  else head = `exit code ${res.exitCode}`;
  const parts = [head];
  for (const [name, body, truncated, dropped] of [
    ["stdout", stdout, res.stdoutTruncated, res.stdoutDropped],
    ["stderr", stderr, res.stderrTruncated, res.stderrDropped],
  ] as const) {
    if (body === "") {
      parts.push(`${name}: (empty)`);
      continue;
    }
    const t = tailOf(body);
    let s = `${name}${t.cut ? " (last 2000 lines / 50 KB shown)" : ""}:\n${t.text}`;
    if (truncated) s += `\n[output cut at the host's bound${dropped ? `: ${dropped} bytes dropped` : ""}]`;
    parts.push(s);
  }
  return parts.join("\n\n");
}

function what(p: ExecParams): string {
  const s = p.command ?? [p.executable, ...(p.args ?? [])].join(" ");
  return s.length > 200 ? s.slice(0, 200) + "…" : s;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Registers the session tools on pi; client gives the host's client, project the configured project. */
export function registerSessionTools(pi: PiAPI, client: () => SessionHost, project: () => string | undefined, labels: { deny: string; allowOnce: string }): void {
  pi.registerTool<StartParams>({
    name: "sandbox_session_start",
    label: "Sandbox session start",
    description:
      "Start a sandbox session: an offline toolbox container on the roundtable-sandbox host that keeps its files (/work) and background processes " +
      "across sandbox_exec calls, until sandbox_session_close or its time to live. The project is read-only at /workspace. Returns the session id. " +
      "network: true lets its execs ask the human for network, one exec at a time.",
    promptSnippet: "Start a sandbox session (a container that keeps its files across sandbox_exec calls)",
    promptGuidelines: ["Use a sandbox session when a task needs several steps in the same environment; close it when done."],
    parameters: startParameters,
    async execute(_id, params, signal) {
      const req: { project?: string; ttlSeconds?: number; network?: boolean } = {};
      const p = project();
      if (p) req.project = p;
      if (params.ttl_seconds !== undefined) req.ttlSeconds = params.ttl_seconds;
      if (params.network) req.network = true;
      let st: Session;
      try {
        st = await client().createSession(req, { signal });
      } catch (err) {
        throw sessionRefusal("start the session", err);
      }
      return text(`session ${st.id} started; it is removed at ${new Date(st.expiresAt).toISOString().replace(/\.\d{3}Z$/, "Z")} unless closed before`, { session: st });
    },
  });

  pi.registerTool<ExecParams>({
    name: "sandbox_exec",
    label: "Sandbox exec",
    description:
      "Run a command in a sandbox session, as its unprivileged user (root: true for package installation). Files and background processes stay " +
      "for the next call. Returns stdout, stderr and the exit code; a non-zero exit is a tool error. network: true asks the human to allow this one exec. " +
      "Output is bounded: the last 2000 lines / 50 KB of each stream are shown.",
    parameters: execParameters,
    async execute(_id, params, signal, onUpdate, ctx) {
      const hasCommand = typeof params.command === "string" && params.command !== "";
      const hasExec = typeof params.executable === "string" && params.executable !== "";
      if (hasCommand === hasExec) throw new Error("sandbox_exec needs exactly one of command or executable");
      if (hasCommand && params.args?.length) throw new Error("args go with executable (argv mode), not with command");
      if (params.network) {
        // No UI, no network: nothing is started.
        if (!ctx.hasUI) throw new Error("network was requested but there is no UI to ask the human (print or JSON mode): denied, nothing was started");
        const choice = await ctx.ui.select(`Allow network for this one sandbox exec in session ${params.session_id}?\n${what(params)}`, [labels.deny, labels.allowOnce], { signal });
        if (choice !== labels.allowOnce) throw new Error("network denied by the user: nothing was started");
      }
      const x: SessionExec = {};
      if (hasCommand) x.command = params.command;
      else {
        x.executable = params.executable;
        if (params.args?.length) x.args = params.args;
      }
      if (params.cwd) x.cwd = params.cwd;
      if (params.stdin) x.stdin = Buffer.from(params.stdin).toString("base64");
      if (params.timeout_seconds !== undefined) x.timeoutSeconds = params.timeout_seconds;
      if (params.root) x.root = true;
      if (params.network) x.network = true;
      const c = client();
      let shown = "";
      let adminRefused = false;
      let got;
      try {
        got = await c.execToEnd(params.session_id, x, {
          signal,
          onEvent: async (ev) => {
            if (ev.type === "approval") {
              // The human allowed it above; the host wants that said by an
              // admin. A refusal here leaves the loop, which ends the exec.
              try {
                await c.approveExec(params.session_id, ev.execId, { signal });
              } catch (err) {
                if (err instanceof SandboxError && err.status === 403) adminRefused = true;
                throw err;
              }
            } else if (ev.type === "stdout" && ev.data) {
              shown += Buffer.from(ev.data, "base64").toString("utf8");
              onUpdate?.(text(tailOf(shown).text));
            }
          },
        });
      } catch (err) {
        if (signal?.aborted) throw new Error("exec cancelled");
        if (adminRefused) {
          throw new Error("the user allowed network, but approving an exec needs the host's admin role, which this user lacks: the exec did not start");
        }
        throw sessionRefusal("run the command", err);
      }
      const body = formatExec(got.result, got.stdout.toString("utf8"), got.stderr.toString("utf8"));
      // As Pi's bash: a non-zero exit is a tool error.
      if (got.result.exitCode !== 0) throw new Error(body);
      return text(body, { execId: got.execId, result: got.result });
    },
  });

  pi.registerTool<WriteFileParams>({
    name: "sandbox_write_file",
    label: "Sandbox write file",
    description: "Write a file in a sandbox session (atomically; parent directories must exist).",
    parameters: writeFileParameters,
    async execute(_id, params, signal) {
      let data: Uint8Array | string = params.content ?? "";
      if (params.content_base64 !== undefined && params.content_base64 !== "") {
        if (params.content) throw new Error("give content or content_base64, not both");
        if (!/^[A-Za-z0-9+/]*={0,2}$/.test(params.content_base64) || params.content_base64.length % 4 !== 0) throw new Error("content_base64 is not base64");
        data = Buffer.from(params.content_base64, "base64");
      }
      let f: SessionFile;
      try {
        f = await client().putFile(params.session_id, params.path, data, params.mode, { signal });
      } catch (err) {
        throw sessionRefusal("write the file", err);
      }
      return text(`wrote ${f.size} bytes`, { size: f.size });
    },
  });

  pi.registerTool<ReadFileParams>({
    name: "sandbox_read_file",
    label: "Sandbox read file",
    description: "Read a file of a sandbox session: its text, or base64 when it is not UTF-8. The first 2000 lines / 50 KB are shown.",
    parameters: readFileParameters,
    async execute(_id, params, signal) {
      let f: SessionFileData;
      try {
        f = await client().getFile(params.session_id, params.path, { signal });
      } catch (err) {
        throw sessionRefusal("read the file", err);
      }
      let body: string;
      try {
        body = utf8.decode(f.data);
      } catch {
        body = "base64 (not UTF-8):\n" + f.data.toString("base64");
      }
      const h = headOf(body);
      return text(h.cut ? `${h.text}\n[first 2000 lines / 50 KB of ${f.size} bytes shown]` : h.text, { size: f.size });
    },
  });

  pi.registerTool<CloseParams>({
    name: "sandbox_session_close",
    label: "Sandbox session close",
    description: "Close a sandbox session: its container, files and processes are removed.",
    parameters: closeParameters,
    async execute(_id, params, signal) {
      try {
        await client().closeSession(params.session_id, { signal });
      } catch (err) {
        throw sessionRefusal("close the session", err);
      }
      return text("session closed");
    },
  });
}
