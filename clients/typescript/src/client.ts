// The host API's client over its Unix socket. Every operation of the
// OpenAPI document is one method (operationTable is checked against the
// generated operations at compile time); the NDJSON streams are async
// iterators; each call takes an AbortSignal and a deadline; an error
// answer is a SandboxError carrying the status and the host's generic
// reason. Only node:http: no dependency, and Bun runs it too.
import * as http from "node:http";

import type { components, operations } from "./schema.js";

type Schemas = components["schemas"];
export type Health = Schemas["Health"];
export type TurnRequest = Schemas["TurnRequest"];
export type TurnResponse = Schemas["TurnResponse"];
export type ChannelStatus = Schemas["ChannelStatus"];
export type ChannelList = Schemas["ChannelList"];
export type ModeRequest = Schemas["ModeRequest"];
export type CancelResponse = Schemas["CancelResponse"];
export type TurnList = Schemas["TurnList"];
export type RunParams = Schemas["RunParams"];
export type RunStatus = Schemas["RunStatus"];
export type RunArtifact = Schemas["RunArtifact"];
export type RunList = Schemas["RunList"];
export type CredentialList = Schemas["CredentialList"];
export type RunEvent = Schemas["RunEvent"];
export type DelegationRequest = Schemas["DelegationRequest"];
export type JobStatus = Schemas["JobStatus"];
export type JobEvent = Schemas["JobEvent"];
export type PrecheckRequest = Schemas["PrecheckRequest"];
export type PrecheckAnswer = Schemas["PrecheckAnswer"];
export type ErrorResponse = Schemas["ErrorResponse"];
export type SessionCreate = Schemas["SessionCreate"];
export type Session = Schemas["Session"];
export type SessionApproval = Schemas["SessionApproval"];
export type SessionList = Schemas["SessionList"];
export type SessionExec = Schemas["SessionExec"];
export type SessionExecEvent = Schemas["SessionExecEvent"];
export type SessionExecResult = Schemas["SessionExecResult"];
export type SessionFile = Schemas["SessionFile"];
export type SessionEntry = Schemas["SessionEntry"];
export type SessionListing = Schemas["SessionListing"];

/** A file got from a session: its bytes decoded (data is base64 on the wire). */
export type SessionFileData = Omit<SessionFile, "data"> & { data: Buffer };

/** What execToEnd returns: the exec's id, its result and its whole output (as the host kept it). */
export interface ExecOutcome {
  execId: string;
  result: SessionExecResult;
  stdout: Buffer;
  stderr: Buffer;
}

/**
 * A session call's default deadline when neither the call nor the client
 * sets one: a create (the container started), a file of up to 64 MiB, a
 * pause or resume (pkg/client's DefaultSessionCallTimeout).
 */
export const SESSION_CALL_TIMEOUT_MS = 2 * 60_000;
/** Following one exec by default: its own timeout is at most an hour (pkg/client's DefaultExecTimeout). */
export const EXEC_TIMEOUT_MS = 65 * 60_000;

/** The packaged host's socket. */
export const DEFAULT_SOCKET = "/run/roundtable-sandbox/host.sock";

/** Every operation of the document: its method and path pattern. */
export const operationTable = {
  getMetrics: ["GET", "/metrics"],
  getHealth: ["GET", "/v1/health"],
  getOpenAPI: ["GET", "/v1/openapi.json"],
  listTurns: ["GET", "/v1/turns"],
  listChannels: ["GET", "/v1/channels"],
  getChannel: ["GET", "/v1/channels/{channel}"],
  postTurn: ["POST", "/v1/channels/{channel}/turns"],
  putMode: ["PUT", "/v1/channels/{channel}/mode"],
  postFresh: ["POST", "/v1/channels/{channel}/fresh"],
  postCancel: ["POST", "/v1/channels/{channel}/cancel"],
  listRuns: ["GET", "/v1/runs"],
  postRun: ["POST", "/v1/runs"],
  getRun: ["GET", "/v1/runs/{run}"],
  runEvents: ["GET", "/v1/runs/{run}/events"],
  cancelRun: ["POST", "/v1/runs/{run}/cancel"],
  approveRun: ["POST", "/v1/runs/{run}/approve"],
  denyRun: ["POST", "/v1/runs/{run}/deny"],
  listCredentials: ["GET", "/v1/credentials"],
  postDelegation: ["POST", "/v1/channels/{channel}/delegations"],
  jobEvents: ["GET", "/v1/channels/{channel}/jobs/events"],
  getJob: ["GET", "/v1/jobs/{job}"],
  postPrecheck: ["POST", "/v1/prechecks"],
  listSessions: ["GET", "/v1/sessions"],
  createSession: ["POST", "/v1/sessions"],
  getSession: ["GET", "/v1/sessions/{session}"],
  closeSession: ["POST", "/v1/sessions/{session}/close"],
  sessionExec: ["POST", "/v1/sessions/{session}/exec"],
  sessionCancel: ["POST", "/v1/sessions/{session}/cancel"],
  sessionExecApprove: ["POST", "/v1/sessions/{session}/approve"],
  sessionExecDeny: ["POST", "/v1/sessions/{session}/deny"],
  sessionPause: ["POST", "/v1/sessions/{session}/pause"],
  sessionResume: ["POST", "/v1/sessions/{session}/resume"],
  sessionPut: ["POST", "/v1/sessions/{session}/files/put"],
  sessionGet: ["POST", "/v1/sessions/{session}/files/get"],
  sessionTar: ["POST", "/v1/sessions/{session}/files/tar"],
  sessionList: ["POST", "/v1/sessions/{session}/files/list"],
  sessionPutRaw: ["PUT", "/v1/sessions/{session}/files/raw"],
  sessionGetRaw: ["GET", "/v1/sessions/{session}/files/raw"],
} as const satisfies Record<keyof operations, readonly [string, string]>;

export type OperationId = keyof typeof operationTable;

/** An answer other than 2xx, or a host that could not be reached. */
export class SandboxError extends Error {
  /** The HTTP status; 0 when the host was not reached (see code). */
  readonly status: number;
  /** The host's generic reason (ErrorResponse.error), or why it was not reached. */
  readonly reason: string;
  /** The socket error's code when the host was not reached (ENOENT, ECONNREFUSED, EACCES, ...). */
  readonly code?: string;
  /** A failed turn's id (the X-Sandbox-Turn header). */
  readonly turnId?: string;
  constructor(status: number, reason: string, opts: { code?: string; turnId?: string; cause?: unknown } = {}) {
    super(status ? `sandbox host: ${status}: ${reason}` : `sandbox host unreachable: ${reason}`, { cause: opts.cause });
    this.name = "SandboxError";
    this.status = status;
    this.reason = reason;
    this.code = opts.code;
    this.turnId = opts.turnId;
  }
}

/** An exec the host ended with an error event (it answered 200, then could not run or finish it), or whose stream ended without a result. */
export class ExecError extends Error {
  /** The exec's id ("" when the stream ended before naming it). */
  readonly execId: string;
  /** The host's generic reason (the error event's text). */
  readonly reason: string;
  constructor(execId: string, reason: string) {
    super(`sandbox host: exec ${execId || "(unnamed)"}: ${reason}`);
    this.name = "ExecError";
    this.execId = execId;
    this.reason = reason;
  }
}

export interface ClientOptions {
  /** The host's socket; DEFAULT_SOCKET when absent. */
  socketPath?: string;
  /** A deadline for every call without its own (ms); none when absent. */
  timeoutMs?: number;
}

export interface CallOptions {
  /** Cancels the call (and ends a stream): it rejects with the signal's reason. */
  signal?: AbortSignal;
  /** The call's deadline in ms (a stream's whole life): it rejects with a TimeoutError. */
  timeoutMs?: number;
}

/** A signal that aborts when any of signals does, and a release of its listeners. */
function anySignal(signals: (AbortSignal | undefined)[]): { signal?: AbortSignal; release: () => void } {
  const live = signals.filter((s): s is AbortSignal => s !== undefined);
  if (live.length === 0) return { release: () => {} };
  if (live.length === 1) return { signal: live[0], release: () => {} };
  const ctl = new AbortController();
  const offs: (() => void)[] = [];
  const release = () => offs.forEach((f) => f());
  for (const s of live) {
    if (s.aborted) {
      ctl.abort(s.reason);
      break;
    }
    const on = () => ctl.abort(s.reason);
    s.addEventListener("abort", on, { once: true });
    offs.push(() => s.removeEventListener("abort", on));
  }
  return { signal: ctl.signal, release };
}

function timeoutSignal(ms: number | undefined): { signal?: AbortSignal; clear: () => void } {
  if (ms === undefined) return { clear: () => {} };
  // AbortSignal.timeout would do, but its timer cannot be cleared: a
  // process waiting on nothing else would stay up until it fires.
  const ctl = new AbortController();
  const t = setTimeout(() => ctl.abort(new DOMException("sandbox host call timed out", "TimeoutError")), ms);
  return { signal: ctl.signal, clear: () => clearTimeout(t) };
}

interface Sent {
  res: http.IncomingMessage;
  done: () => void;
  signal?: AbortSignal;
}

export class SandboxClient {
  readonly socketPath: string;
  private readonly timeoutMs?: number;

  constructor(opts: ClientOptions = {}) {
    this.socketPath = opts.socketPath ?? DEFAULT_SOCKET;
    this.timeoutMs = opts.timeoutMs;
  }

  /** The path of an operation with its parameter escaped ("/" in a channel is %2F). */
  static path(op: OperationId, param?: string): string {
    const pattern: string = operationTable[op][1];
    const i = pattern.indexOf("{");
    if (i < 0) return pattern;
    if (param === undefined || param === "") throw new TypeError(`${op} needs its path parameter`);
    return pattern.slice(0, i) + encodeURIComponent(param) + pattern.slice(pattern.indexOf("}") + 1);
  }

  // send makes one request and resolves with a 2xx response; an error
  // answer rejects with its SandboxError. done releases the deadline and
  // the abort listeners (the caller calls it once the body is read).
  // raw, when set, is the query and the bytes of a raw file route
  // (application/octet-stream) instead of a JSON body.
  private send(op: OperationId, param: string | undefined, body: unknown, opts: CallOptions = {}, accept: number[] = [],
    raw?: { query: URLSearchParams; data?: Buffer }): Promise<Sent> {
    const path = SandboxClient.path(op, param) + (raw ? "?" + raw.query.toString() : "");
    const method = operationTable[op][0];
    const deadline = timeoutSignal(opts.timeoutMs ?? this.timeoutMs);
    const combined = anySignal([opts.signal, deadline.signal]);
    const done = () => {
      deadline.clear();
      combined.release();
    };
    const signal = combined.signal;
    return new Promise<Sent>((resolve, reject) => {
      const fail = (err: unknown) => {
        done();
        reject(err);
      };
      if (signal?.aborted) return fail(signal.reason);
      const data = raw ? raw.data : body === undefined ? undefined : Buffer.from(JSON.stringify(body));
      const headers: Record<string, string | number> = { Accept: "application/json, application/x-ndjson" };
      if (data) {
        headers["Content-Type"] = raw ? "application/octet-stream" : "application/json";
        headers["Content-Length"] = data.length;
      }
      const req = http.request({ socketPath: this.socketPath, method, path, headers, agent: false });
      const onAbort = () => req.destroy(signal?.reason);
      signal?.addEventListener("abort", onAbort, { once: true });
      const finish = () => {
        signal?.removeEventListener("abort", onAbort);
        done();
      };
      req.on("error", (err: NodeJS.ErrnoException) => {
        signal?.removeEventListener("abort", onAbort);
        if (signal?.aborted) return fail(signal.reason);
        if (err.code && !("status" in err)) {
          return fail(new SandboxError(0, `${err.code} on ${this.socketPath}`, { code: err.code, cause: err }));
        }
        fail(err);
      });
      req.on("response", (res) => {
        const status = res.statusCode ?? 0;
        if ((status >= 200 && status < 300) || accept.includes(status)) {
          // Errors of the body from here on surface through the reader.
          req.removeAllListeners("error");
          req.on("error", () => {});
          resolve({ res, done: finish, signal });
          return;
        }
        readAll(res).then(
          (buf) => {
            finish();
            let reason = res.statusMessage ?? "error";
            try {
              const e = JSON.parse(buf.toString("utf8")) as ErrorResponse;
              if (typeof e.error === "string") reason = e.error;
            } catch {
              // not the documented shape: keep the status line's text
            }
            const turn = res.headers["x-sandbox-turn"];
            reject(new SandboxError(status, reason, { turnId: typeof turn === "string" ? turn : undefined }));
          },
          (err) => fail(signal?.aborted ? signal.reason : err),
        );
      });
      req.end(data);
    });
  }

  private async json<T>(op: OperationId, param?: string, body?: unknown, opts?: CallOptions, accept?: number[], query?: URLSearchParams): Promise<T> {
    const { res, done, signal } = await this.send(op, param, body, opts, accept, query ? { query } : undefined);
    try {
      return JSON.parse((await readAll(res, signal)).toString("utf8")) as T;
    } finally {
      done();
    }
  }

  private async *stream<T>(op: OperationId, param: string, opts?: CallOptions, body?: unknown): AsyncGenerator<T, void, undefined> {
    const { res, done, signal } = await this.send(op, param, body, opts);
    try {
      let pending = "";
      for await (const chunk of chunks(res, signal)) {
        pending += chunk.toString("utf8");
        let nl: number;
        while ((nl = pending.indexOf("\n")) >= 0) {
          const line = pending.slice(0, nl);
          pending = pending.slice(nl + 1);
          if (line.trim() !== "") yield JSON.parse(line) as T;
        }
      }
      if (pending.trim() !== "") yield JSON.parse(pending) as T;
    } finally {
      // A consumer that stops early (break, return, throw) closes the
      // connection: the host ends the stream when its client leaves.
      res.destroy();
      done();
    }
  }

  /** GET /v1/health (any peer): liveness and the caller's own role. A stopping host's 503 carries a Health body (status stopping): returned, not thrown. */
  health(opts?: CallOptions): Promise<Health> {
    return this.json<Health>("getHealth", undefined, undefined, opts, [503]);
  }
  /** GET /v1/openapi.json (any peer). */
  openapi(opts?: CallOptions): Promise<Record<string, unknown>> {
    return this.json("getOpenAPI", undefined, undefined, opts);
  }
  /** GET /metrics (client): Prometheus' text format. */
  async metrics(opts?: CallOptions): Promise<string> {
    const { res, done, signal } = await this.send("getMetrics", undefined, undefined, opts);
    try {
      return (await readAll(res, signal)).toString("utf8");
    } finally {
      done();
    }
  }
  listTurns(opts?: CallOptions): Promise<TurnList> {
    return this.json("listTurns", undefined, undefined, opts);
  }
  listChannels(opts?: CallOptions): Promise<ChannelList> {
    return this.json("listChannels", undefined, undefined, opts);
  }
  channel(channel: string, opts?: CallOptions): Promise<ChannelStatus> {
    return this.json("getChannel", channel, undefined, opts);
  }
  turn(channel: string, req: TurnRequest, opts?: CallOptions): Promise<TurnResponse> {
    return this.json("postTurn", channel, req, opts);
  }
  setMode(channel: string, req: ModeRequest, opts?: CallOptions): Promise<ChannelStatus> {
    return this.json("putMode", channel, req, opts);
  }
  fresh(channel: string, opts?: CallOptions): Promise<ChannelStatus> {
    return this.json("postFresh", channel, undefined, opts);
  }
  cancelTurn(channel: string, opts?: CallOptions): Promise<CancelResponse> {
    return this.json("postCancel", channel, undefined, opts);
  }
  /** GET /v1/credentials: the credentials a run (of project) by this user may ask for, and the variable each placeholder arrives in. */
  credentials(project?: string, opts?: CallOptions): Promise<CredentialList> {
    return this.json("listCredentials", undefined, undefined, opts, undefined, project ? new URLSearchParams({ project }) : undefined);
  }
  listRuns(opts?: CallOptions): Promise<RunList> {
    return this.json("listRuns", undefined, undefined, opts);
  }
  /** POST /v1/runs: the run, admitted (202); follow it with runEvents or run. */
  startRun(params: RunParams, opts?: CallOptions): Promise<RunStatus> {
    return this.json("postRun", undefined, params, opts);
  }
  run(id: string, opts?: CallOptions): Promise<RunStatus> {
    return this.json("getRun", id, undefined, opts);
  }
  /** GET /v1/runs/{run}/events: history first, until the result event (its status is the finished run). */
  runEvents(id: string, opts?: CallOptions): AsyncGenerator<RunEvent, void, undefined> {
    return this.stream<RunEvent>("runEvents", id, opts);
  }
  cancelRun(id: string, opts?: CallOptions): Promise<RunStatus> {
    return this.json("cancelRun", id, undefined, opts);
  }
  approveRun(id: string, opts?: CallOptions): Promise<RunStatus> {
    return this.json("approveRun", id, undefined, opts);
  }
  denyRun(id: string, opts?: CallOptions): Promise<RunStatus> {
    return this.json("denyRun", id, undefined, opts);
  }
  delegate(channel: string, req: DelegationRequest, opts?: CallOptions): Promise<JobStatus> {
    return this.json("postDelegation", channel, req, opts);
  }
  /** GET /v1/channels/{channel}/jobs/events: never ends by itself; end it with a signal or by leaving the loop. */
  jobEvents(channel: string, opts?: CallOptions): AsyncGenerator<JobEvent, void, undefined> {
    return this.stream<JobEvent>("jobEvents", channel, opts);
  }
  job(id: string, opts?: CallOptions): Promise<JobStatus> {
    return this.json("getJob", id, undefined, opts);
  }
  precheck(req: PrecheckRequest, opts?: CallOptions): Promise<PrecheckAnswer> {
    return this.json("postPrecheck", undefined, req, opts);
  }

  // Sessions (docs/api.md, Sessions). Every session call has a deadline:
  // the call's, else the client's, else SESSION_CALL_TIMEOUT_MS
  // (EXEC_TIMEOUT_MS for an exec's whole stream).
  private bounded(opts: CallOptions | undefined, ms: number): CallOptions {
    return { ...opts, timeoutMs: opts?.timeoutMs ?? this.timeoutMs ?? ms };
  }
  /** POST /v1/sessions: a session owned by the caller (201), running. */
  createSession(req: SessionCreate = {}, opts?: CallOptions): Promise<Session> {
    return this.json("createSession", undefined, req, this.bounded(opts, SESSION_CALL_TIMEOUT_MS));
  }
  /** GET /v1/sessions: the caller's own sessions (an admin's: all). */
  listSessions(opts?: CallOptions): Promise<SessionList> {
    return this.json("listSessions", undefined, undefined, this.bounded(opts, SESSION_CALL_TIMEOUT_MS));
  }
  session(id: string, opts?: CallOptions): Promise<Session> {
    return this.json("getSession", id, undefined, this.bounded(opts, SESSION_CALL_TIMEOUT_MS));
  }
  /** docker pause: memory kept, no CPU; any later request resumes it too. */
  pauseSession(id: string, opts?: CallOptions): Promise<Session> {
    return this.json("sessionPause", id, undefined, this.bounded(opts, SESSION_CALL_TIMEOUT_MS));
  }
  resumeSession(id: string, opts?: CallOptions): Promise<Session> {
    return this.json("sessionResume", id, undefined, this.bounded(opts, SESSION_CALL_TIMEOUT_MS));
  }
  /** Removes the session with its files and processes. */
  closeSession(id: string, opts?: CallOptions): Promise<Session> {
    return this.json("closeSession", id, undefined, this.bounded(opts, SESSION_CALL_TIMEOUT_MS));
  }
  /**
   * POST /v1/sessions/{session}/exec: its events as they come (approval
   * first for a network exec, started, stdout/stderr chunks with base64
   * data, then one result or error). Leaving the loop (or the signal)
   * closes the connection, which kills the exec.
   */
  exec(id: string, req: SessionExec, opts?: CallOptions): AsyncGenerator<SessionExecEvent, void, undefined> {
    return this.stream<SessionExecEvent>("sessionExec", id, this.bounded(opts, EXEC_TIMEOUT_MS), req);
  }
  /**
   * Runs req in the session to its end: the result and the whole output.
   * An error event, or a stream that ends without a result, rejects with
   * an ExecError. onEvent sees each event as it comes (an approval event
   * names the exec an admin must approve).
   */
  async execToEnd(id: string, req: SessionExec, opts: CallOptions & { onEvent?: (ev: SessionExecEvent) => void | Promise<void> } = {}): Promise<ExecOutcome> {
    const out: Buffer[] = [];
    const errOut: Buffer[] = [];
    let execId = "";
    for await (const ev of this.exec(id, req, opts)) {
      execId ||= ev.execId;
      await opts.onEvent?.(ev);
      if (ev.type === "stdout" && ev.data) out.push(Buffer.from(ev.data, "base64"));
      else if (ev.type === "stderr" && ev.data) errOut.push(Buffer.from(ev.data, "base64"));
      else if (ev.type === "result" && ev.result) return { execId, result: ev.result, stdout: Buffer.concat(out), stderr: Buffer.concat(errOut) };
      else if (ev.type === "error") throw new ExecError(execId, ev.error ?? "the exec failed");
    }
    throw new ExecError(execId, "the exec's event stream ended without a result");
  }
  /** Kills a running exec's process group. */
  cancelExec(id: string, execId: string, opts?: CallOptions): Promise<Session> {
    return this.json("sessionCancel", id, { execId }, this.bounded(opts, SESSION_CALL_TIMEOUT_MS));
  }
  /** The admin role: approves a network exec awaiting approval (it starts). */
  approveExec(id: string, execId: string, opts?: CallOptions): Promise<Session> {
    return this.json("sessionExecApprove", id, { execId }, this.bounded(opts, SESSION_CALL_TIMEOUT_MS));
  }
  /** The admin role: denies a network exec awaiting approval (it never starts; its stream ends with an error event). */
  denyExec(id: string, execId: string, opts?: CallOptions): Promise<Session> {
    return this.json("sessionExecDeny", id, { execId }, this.bounded(opts, SESSION_CALL_TIMEOUT_MS));
  }
  /** Writes data at path (relative to /work, or under /output or /tmp) atomically as the session's guest; mode 0 or absent: 0644. A string is written as UTF-8. */
  putFile(id: string, path: string, data: Uint8Array | string, mode?: number, opts?: CallOptions): Promise<SessionFile> {
    const body: Schemas["SessionPut"] = { path, data: Buffer.from(data).toString("base64") };
    if (mode) body.mode = mode;
    return this.json("sessionPut", id, body, this.bounded(opts, SESSION_CALL_TIMEOUT_MS));
  }
  /** Reads the file at path: its bytes decoded. */
  async getFile(id: string, path: string, opts?: CallOptions): Promise<SessionFileData> {
    return decodeFile(await this.json<SessionFile>("sessionGet", id, { path }, this.bounded(opts, SESSION_CALL_TIMEOUT_MS)));
  }
  /** The directory at path as a tar (skipped: entries left out). */
  async getTar(id: string, path: string, opts?: CallOptions): Promise<SessionFileData> {
    return decodeFile(await this.json<SessionFile>("sessionTar", id, { path }, this.bounded(opts, SESSION_CALL_TIMEOUT_MS)));
  }
  /** putFile with the bytes as the request body (PUT .../files/raw): no base64. */
  async putFileRaw(id: string, path: string, data: Uint8Array | string, mode?: number, opts?: CallOptions): Promise<SessionFile> {
    const query = new URLSearchParams({ path });
    if (mode) query.set("mode", mode.toString(8));
    const { res, done, signal } = await this.send("sessionPutRaw", id, undefined, this.bounded(opts, SESSION_CALL_TIMEOUT_MS), [], { query, data: Buffer.from(data) });
    try {
      return JSON.parse((await readAll(res, signal)).toString("utf8")) as SessionFile;
    } finally {
      done();
    }
  }
  /** getFile (tar: getTar) with the bytes as the answer's body (GET .../files/raw): no base64; mode, changed and skipped from its headers. */
  async getFileRaw(id: string, path: string, opts: CallOptions & { tar?: boolean } = {}): Promise<SessionFileData> {
    const query = new URLSearchParams({ path });
    if (opts.tar) query.set("tar", "true");
    const { res, done, signal } = await this.send("sessionGetRaw", id, undefined, this.bounded(opts, SESSION_CALL_TIMEOUT_MS), [], { query });
    try {
      const data = await readAll(res, signal);
      const f: SessionFileData = { path, size: data.length, data };
      const mode = res.headers["x-sandbox-file-mode"];
      if (typeof mode === "string") f.mode = parseInt(mode, 8);
      if (res.headers["x-sandbox-file-changed"] === "true") f.changed = true;
      const skipped = res.headers["x-sandbox-file-skipped"];
      if (typeof skipped === "string" && skipped !== "0") f.skipped = Number(skipped);
      return f;
    } finally {
      done();
    }
  }
  /** Lists the directory at path (a symlink is listed, never followed). */
  listFiles(id: string, path: string, opts?: CallOptions): Promise<SessionListing> {
    return this.json("sessionList", id, { path }, this.bounded(opts, SESSION_CALL_TIMEOUT_MS));
  }

  /** Starts a run and follows its events to the end: the finished run. onEvent sees each event as it comes. */
  async runToEnd(params: RunParams, opts: CallOptions & { onEvent?: (ev: RunEvent) => void } = {}): Promise<RunStatus> {
    const st = await this.startRun(params, opts);
    for await (const ev of this.runEvents(st.id, opts)) {
      opts.onEvent?.(ev);
      if (ev.type === "result" && ev.status) return ev.status;
    }
    // The stream ended without a result (the host stopped): ask once.
    return this.run(st.id, opts);
  }
}

function decodeFile(f: SessionFile): SessionFileData {
  return { ...f, data: Buffer.from(f.data ?? "", "base64") };
}

// chunks reads a body; a body cut by the call's signal throws the
// signal's reason (an AbortError or TimeoutError), not the socket's error.
async function* chunks(res: http.IncomingMessage, signal?: AbortSignal): AsyncGenerator<Buffer> {
  try {
    for await (const chunk of res as AsyncIterable<Buffer>) yield chunk;
  } catch (err) {
    throw signal?.aborted ? signal.reason : err;
  }
  if (signal?.aborted) throw signal.reason;
}

async function readAll(res: http.IncomingMessage, signal?: AbortSignal): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const chunk of chunks(res, signal)) parts.push(chunk);
  return Buffer.concat(parts);
}
