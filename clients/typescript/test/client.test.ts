// Unit tests of the client against a fake host on a Unix socket in a
// temporary directory: every operation's method, path and body; error
// answers; NDJSON streams; cancellation and deadlines.
import assert from "node:assert/strict";
import { once } from "node:events";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import * as http from "node:http";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, beforeEach, describe, it } from "node:test";
import { fileURLToPath } from "node:url";

import { ExecError, operationTable, SandboxClient, SandboxError, type OperationId, type SessionExecEvent } from "../src/index.js";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const docPath = join(root, "..", "..", "pkg", "api", "openapi.json");

type Handler = (req: http.IncomingMessage, body: string, res: http.ServerResponse) => void;

interface Seen {
  method: string;
  url: string;
  body: string;
}

let dir: string;
let server: http.Server;
let handler: Handler;
let seen: Seen[];
let client: SandboxClient;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "sandbox-client-"));
  server = http.createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on("data", (c: Buffer) => parts.push(c));
    req.on("end", () => {
      const body = Buffer.concat(parts).toString("utf8");
      seen.push({ method: req.method ?? "", url: req.url ?? "", body });
      handler(req, body, res);
    });
  });
  server.listen(join(dir, "host.sock"));
  await once(server, "listening");
  client = new SandboxClient({ socketPath: join(dir, "host.sock") });
});

after(() => {
  server.closeAllConnections();
  server.close();
  rmSync(dir, { recursive: true, force: true });
});

beforeEach(() => {
  seen = [];
  handler = (_req, _body, res) => json(res, 200, { ok: true });
});

function json(res: http.ServerResponse, status: number, v: unknown) {
  res.writeHead(status, { "Content-Type": "application/json" });
  res.end(JSON.stringify(v) + "\n");
}

describe("operations", () => {
  it("covers every operation of the OpenAPI document, at its method and path", () => {
    const doc = JSON.parse(readFileSync(docPath, "utf8")) as { paths: Record<string, Record<string, { operationId: string }>> };
    const want: Record<string, [string, string]> = {};
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) want[op.operationId] = [method.toUpperCase(), path];
    }
    assert.deepEqual(Object.fromEntries(Object.entries(operationTable).map(([k, v]) => [k, [...v]])), want);
  });

  const run = "0123456789abcdef0123456789abcdef";
  const calls: [OperationId, (c: SandboxClient) => Promise<unknown>, string, unknown?][] = [
    ["getMetrics", (c) => c.metrics(), "/metrics"],
    ["getHealth", (c) => c.health(), "/v1/health"],
    ["getOpenAPI", (c) => c.openapi(), "/v1/openapi.json"],
    ["listTurns", (c) => c.listTurns(), "/v1/turns"],
    ["listChannels", (c) => c.listChannels(), "/v1/channels"],
    ["getChannel", (c) => c.channel("guild/12 34"), "/v1/channels/guild%2F12%2034"],
    ["postTurn", (c) => c.turn("g:1", { speaker: { id: "u", name: "Ada" }, text: "hi" }), "/v1/channels/g%3A1/turns", { speaker: { id: "u", name: "Ada" }, text: "hi" }],
    ["putMode", (c) => c.setMode("g:1", { mode: "on" }), "/v1/channels/g%3A1/mode", { mode: "on" }],
    ["postFresh", (c) => c.fresh("g:1"), "/v1/channels/g%3A1/fresh"],
    ["postCancel", (c) => c.cancelTurn("g:1"), "/v1/channels/g%3A1/cancel"],
    ["listRuns", (c) => c.listRuns(), "/v1/runs"],
    ["postRun", (c) => c.startRun({ command: "true" }), "/v1/runs", { command: "true" }],
    ["getRun", (c) => c.run(run), `/v1/runs/${run}`],
    ["runEvents", async (c) => { for await (const _ of c.runEvents(run)) { /* drain */ } }, `/v1/runs/${run}/events`],
    ["cancelRun", (c) => c.cancelRun(run), `/v1/runs/${run}/cancel`],
    ["approveRun", (c) => c.approveRun(run), `/v1/runs/${run}/approve`],
    ["denyRun", (c) => c.denyRun(run), `/v1/runs/${run}/deny`],
    ["listCredentials", (c) => c.credentials("web app"), "/v1/credentials?project=web+app"],
    ["postDelegation", (c) => c.delegate("g:1", { title: "t", task: "x", author: { id: "u", name: "Ada" } }), "/v1/channels/g%3A1/delegations", { title: "t", task: "x", author: { id: "u", name: "Ada" } }],
    ["jobEvents", async (c) => { for await (const _ of c.jobEvents("g:1")) { /* drain */ } }, "/v1/channels/g%3A1/jobs/events"],
    ["getJob", (c) => c.job(run), `/v1/jobs/${run}`],
    ["postPrecheck", (c) => c.precheck({ channel: "g:1", script: "1" }), "/v1/prechecks", { channel: "g:1", script: "1" }],
    ["listSessions", (c) => c.listSessions(), "/v1/sessions"],
    ["createSession", (c) => c.createSession({ project: "p", ttlSeconds: 60 }), "/v1/sessions", { project: "p", ttlSeconds: 60 }],
    ["getSession", (c) => c.session(run), `/v1/sessions/${run}`],
    ["closeSession", (c) => c.closeSession(run), `/v1/sessions/${run}/close`],
    ["sessionExec", async (c) => { for await (const _ of c.exec(run, { command: "ls" })) { /* drain */ } }, `/v1/sessions/${run}/exec`, { command: "ls" }],
    ["sessionCancel", (c) => c.cancelExec(run, "x1"), `/v1/sessions/${run}/cancel`, { execId: "x1" }],
    ["sessionExecApprove", (c) => c.approveExec(run, "x1"), `/v1/sessions/${run}/approve`, { execId: "x1" }],
    ["sessionExecDeny", (c) => c.denyExec(run, "x1"), `/v1/sessions/${run}/deny`, { execId: "x1" }],
    ["sessionPause", (c) => c.pauseSession(run), `/v1/sessions/${run}/pause`],
    ["sessionResume", (c) => c.resumeSession(run), `/v1/sessions/${run}/resume`],
    ["sessionPut", (c) => c.putFile(run, "a/b.txt", "hi", 0o600), `/v1/sessions/${run}/files/put`, { path: "a/b.txt", mode: 0o600, data: "aGk=" }],
    ["sessionGet", (c) => c.getFile(run, "a/b.txt"), `/v1/sessions/${run}/files/get`, { path: "a/b.txt" }],
    ["sessionTar", (c) => c.getTar(run, "a"), `/v1/sessions/${run}/files/tar`, { path: "a" }],
    ["sessionList", (c) => c.listFiles(run, "."), `/v1/sessions/${run}/files/list`, { path: "." }],
    ["sessionPutRaw", (c) => c.putFileRaw(run, "a/b.txt", "hi", 0o600), `/v1/sessions/${run}/files/raw?path=a%2Fb.txt&mode=600`, "hi"],
    ["sessionGetRaw", (c) => c.getFileRaw(run, "a", { tar: true }), `/v1/sessions/${run}/files/raw?path=a&tar=true`],
  ];

  it("has a call for every operation", () => {
    assert.deepEqual(calls.map((c) => c[0]).sort(), Object.keys(operationTable).sort());
  });

  for (const [op, call, path, body] of calls) {
    it(`${op} sends ${operationTable[op][0]} ${path}`, async () => {
      await call(client);
      assert.equal(seen.length, 1);
      assert.equal(seen[0].method, operationTable[op][0]);
      assert.equal(seen[0].url, path);
      if (typeof body === "string") assert.equal(seen[0].body, body); // a raw route's bytes
      else assert.deepEqual(seen[0].body === "" ? undefined : JSON.parse(seen[0].body), body);
    });
  }
});

describe("raw files", () => {
  it("reads the bytes and the mode, changed and skipped headers", async () => {
    handler = (_req, _body, res) => {
      res.writeHead(200, { "Content-Type": "application/octet-stream", "X-Sandbox-File-Mode": "0640", "X-Sandbox-File-Changed": "true", "X-Sandbox-File-Skipped": "2" });
      res.end(Buffer.from([0, 1, 255]));
    };
    const f = await client.getFileRaw("0123456789abcdef0123456789abcdef", "x.bin");
    assert.deepEqual([...f.data], [0, 1, 255]);
    assert.deepEqual([f.size, f.mode, f.changed, f.skipped], [3, 0o640, true, 2]);
  });
});

describe("errors", () => {
  it("carries the status, the generic reason and a failed turn's id", async () => {
    handler = (_req, _body, res) => {
      res.setHeader("X-Sandbox-Turn", "abc");
      json(res, 504, { error: "turn deadline exceeded" });
    };
    const err = await client.turn("c", { speaker: { id: "u", name: "n" }, text: "t" }).catch((e: unknown) => e);
    assert.ok(err instanceof SandboxError);
    assert.deepEqual([err.status, err.reason, err.turnId], [504, "turn deadline exceeded", "abc"]);
  });

  it("keeps the status line's text for a body not of the documented shape", async () => {
    handler = (_req, _body, res) => {
      res.writeHead(502, "Bad Gateway");
      res.end("<html>");
    };
    const err = await client.listRuns().catch((e: unknown) => e);
    assert.ok(err instanceof SandboxError);
    assert.deepEqual([err.status, err.reason], [502, "Bad Gateway"]);
  });

  it("says a host that is not there is unreachable, with the socket's code", async () => {
    const c = new SandboxClient({ socketPath: join(dir, "nothing.sock") });
    const err = await c.health().catch((e: unknown) => e);
    assert.ok(err instanceof SandboxError);
    assert.deepEqual([err.status, err.code], [0, "ENOENT"]);
  });

  it("returns a stopping host's health (503) instead of throwing", async () => {
    handler = (_req, _body, res) => json(res, 503, { status: "stopping", version: "1", accepting: false, running: 0, waiting: 0, role: "client" });
    assert.equal((await client.health()).status, "stopping");
  });

  it("refuses an operation without its path parameter", async () => {
    await assert.rejects(() => client.run(""), TypeError);
  });
});

describe("streams", () => {
  it("yields each NDJSON line, across chunk boundaries, to the last", async () => {
    handler = (_req, _body, res) => {
      res.writeHead(200, { "Content-Type": "application/x-ndjson" });
      res.write('{"seq":1,"type":"state","state":"running"}\n{"seq":2,"ty');
      res.write('pe":"output","stream":"stdout","data":"aGkK"}\n\n');
      res.end('{"seq":3,"type":"result","status":{"id":"x","state":"finished","mode":"shell","ownerUid":0,"createdAt":"2026-12-07T00:00:00Z"}}\n');
    };
    const got = [];
    for await (const ev of client.runEvents("r1")) got.push(ev.seq);
    assert.deepEqual(got, [1, 2, 3]);
  });

  it("runToEnd returns the result event's run and shows every event", async () => {
    handler = (req, _body, res) => {
      if (req.method === "POST") return json(res, 202, { id: "r1", state: "queued", mode: "shell", ownerUid: 0, createdAt: "2026-12-07T00:00:00Z" });
      res.writeHead(200, { "Content-Type": "application/x-ndjson" });
      res.end('{"seq":1,"type":"state","state":"running"}\n{"seq":2,"type":"result","status":{"id":"r1","state":"finished","result":"ok","mode":"shell","ownerUid":0,"createdAt":"2026-12-07T00:00:00Z"}}\n');
    };
    const types: string[] = [];
    const st = await client.runToEnd({ command: "true" }, { onEvent: (ev) => types.push(ev.type) });
    assert.deepEqual([st.result, types], ["ok", ["state", "result"]]);
  });

  it("closes the connection when the consumer leaves the loop", async () => {
    let closed!: Promise<unknown>;
    handler = (req, _body, res) => {
      closed = once(res, "close");
      res.writeHead(200, { "Content-Type": "application/x-ndjson" });
      res.write('{"type":"keepalive"}\n'); // and never ends
    };
    for await (const ev of client.jobEvents("c")) {
      assert.equal(ev.type, "keepalive");
      break;
    }
    await closed;
  });

  it("ends a stream with the signal's reason when it aborts", async () => {
    const ctl = new AbortController();
    handler = (_req, _body, res) => {
      res.writeHead(200, { "Content-Type": "application/x-ndjson" });
      res.write('{"type":"keepalive"}\n');
    };
    const err = await (async () => {
      for await (const _ of client.jobEvents("c", { signal: ctl.signal })) ctl.abort(new Error("stop here"));
    })().catch((e: unknown) => e);
    assert.equal((err as Error).message, "stop here");
  });
});

describe("sessions", () => {
  const sid = "0123456789abcdef0123456789abcdef";
  function ndjson(res: http.ServerResponse, events: SessionExecEvent[]) {
    res.writeHead(200, { "Content-Type": "application/x-ndjson" });
    res.end(events.map((e) => JSON.stringify(e) + "\n").join(""));
  }
  const b64 = (t: string) => Buffer.from(t).toString("base64");

  it("execToEnd gathers each stream's bytes and returns the result, showing every event", async () => {
    handler = (_req, _body, res) =>
      ndjson(res, [
        { type: "started", execId: "x1" },
        { type: "stdout", execId: "x1", data: b64("hel") },
        { type: "stderr", execId: "x1", data: b64("warn\n") },
        { type: "stdout", execId: "x1", data: b64("lo\n") },
        { type: "result", execId: "x1", result: { exitCode: 3, startMs: 1, runMs: 2 } },
      ]);
    const types: string[] = [];
    const got = await client.execToEnd(sid, { executable: "sh", args: ["-c", "x"] }, { onEvent: (ev) => void types.push(ev.type) });
    assert.deepEqual(
      [got.execId, got.result.exitCode, got.stdout.toString(), got.stderr.toString(), types],
      ["x1", 3, "hello\n", "warn\n", ["started", "stdout", "stderr", "stdout", "result"]],
    );
  });

  it("execToEnd rejects an error event with an ExecError carrying the host's reason", async () => {
    handler = (_req, _body, res) =>
      ndjson(res, [
        { type: "approval", execId: "x2" },
        { type: "error", execId: "x2", error: "the network exec was denied by a human; it did not start" },
      ]);
    const err = await client.execToEnd(sid, { command: "curl x", network: true }).catch((e: unknown) => e);
    assert.ok(err instanceof ExecError);
    assert.deepEqual([err.execId, err.reason], ["x2", "the network exec was denied by a human; it did not start"]);
  });

  it("execToEnd rejects a stream that ends without a result", async () => {
    handler = (_req, _body, res) => ndjson(res, [{ type: "started", execId: "x3" }]);
    const err = await client.execToEnd(sid, { command: "true" }).catch((e: unknown) => e);
    assert.ok(err instanceof ExecError);
    assert.equal(err.execId, "x3");
    assert.match(err.reason, /ended without a result/);
  });

  it("execToEnd awaits onEvent before reading on (an approval is decided first)", async () => {
    const order: string[] = [];
    let approved!: () => void;
    const decision = new Promise<void>((resolve) => (approved = resolve));
    handler = (req, body, res) => {
      if (req.url?.endsWith("/approve")) {
        order.push("approve " + (JSON.parse(body) as { execId: string }).execId);
        json(res, 200, { id: sid });
        return approved();
      }
      res.writeHead(200, { "Content-Type": "application/x-ndjson" });
      res.write(JSON.stringify({ type: "approval", execId: "x4" }) + "\n");
      // The rest only once the approval came, as the host does.
      void decision.then(() =>
        res.end([{ type: "started", execId: "x4" }, { type: "result", execId: "x4", result: { exitCode: 0, startMs: 0, runMs: 0 } }].map((e) => JSON.stringify(e) + "\n").join("")),
      );
    };
    const got = await client.execToEnd(sid, { command: "curl x", network: true }, {
      onEvent: async (ev) => {
        order.push(ev.type);
        if (ev.type === "approval") await client.approveExec(sid, ev.execId);
      },
    });
    assert.equal(got.result.exitCode, 0);
    assert.deepEqual(order, ["approval", "approve x4", "started", "result"]);
  });

  it("an exec's consumer leaving the loop closes the connection (the host kills the exec)", async () => {
    let closed!: Promise<unknown>;
    handler = (_req, _body, res) => {
      closed = once(res, "close");
      res.writeHead(200, { "Content-Type": "application/x-ndjson" });
      res.write(JSON.stringify({ type: "started", execId: "x5" }) + "\n"); // and never ends
    };
    for await (const ev of client.exec(sid, { command: "sleep 1000" })) {
      assert.equal(ev.type, "started");
      break;
    }
    await closed;
  });

  it("putFile sends bytes as base64, getFile and getTar decode them", async () => {
    handler = (_req, _body, res) => json(res, 200, { path: "f", size: 3, mode: 0o644, data: Buffer.from([0, 255, 10]).toString("base64") });
    await client.putFile(sid, "f", new Uint8Array([0, 255, 10]));
    assert.deepEqual(JSON.parse(seen[0].body), { path: "f", data: "AP8K" });
    const f = await client.getFile(sid, "f");
    assert.deepEqual([...f.data], [0, 255, 10]);
    assert.deepEqual([...(await client.getTar(sid, "d")).data], [0, 255, 10]);
  });

  it("a session call's refusal is a SandboxError with the status and reason", async () => {
    handler = (_req, _body, res) => json(res, 429, { error: "too many live sessions (sessions.maxLive)" });
    const err = await client.createSession().catch((e: unknown) => e);
    assert.ok(err instanceof SandboxError);
    assert.deepEqual([err.status, err.reason], [429, "too many live sessions (sessions.maxLive)"]);
  });

  it("an exec refused before its stream is a SandboxError", async () => {
    handler = (_req, _body, res) => json(res, 404, { error: "no such session" });
    const err = await client.execToEnd(sid, { command: "true" }).catch((e: unknown) => e);
    assert.ok(err instanceof SandboxError);
    assert.deepEqual([err.status, err.reason], [404, "no such session"]);
  });

  it("an exec ends at its deadline with a TimeoutError", async () => {
    handler = (_req, _body, res) => {
      res.writeHead(200, { "Content-Type": "application/x-ndjson" });
      res.write(JSON.stringify({ type: "started", execId: "x6" }) + "\n");
    };
    const err = await client.execToEnd(sid, { command: "sleep 1000" }, { timeoutMs: 30 }).catch((e: unknown) => e);
    assert.equal((err as Error).name, "TimeoutError");
  });

  it("a session call ends at the client's deadline", async () => {
    handler = () => {};
    const c = new SandboxClient({ socketPath: client.socketPath, timeoutMs: 20 });
    const err = await c.createSession().catch((e: unknown) => e);
    assert.equal((err as Error).name, "TimeoutError");
  });
});

describe("deadlines and cancellation", () => {
  it("rejects with a TimeoutError at the call's deadline", async () => {
    handler = () => {}; // never answers
    const err = await client.listTurns({ timeoutMs: 20 }).catch((e: unknown) => e);
    assert.equal((err as Error).name, "TimeoutError");
  });

  it("applies the client's default deadline", async () => {
    handler = () => {};
    const c = new SandboxClient({ socketPath: client.socketPath, timeoutMs: 20 });
    const err = await c.listTurns().catch((e: unknown) => e);
    assert.equal((err as Error).name, "TimeoutError");
  });

  it("rejects at once with an already aborted signal, sending nothing", async () => {
    const err = await client.listTurns({ signal: AbortSignal.abort() }).catch((e: unknown) => e);
    assert.equal((err as Error).name, "AbortError");
    assert.equal(seen.length, 0);
  });

  it("rejects with the signal's reason when it aborts a waiting call", async () => {
    const ctl = new AbortController();
    handler = () => ctl.abort(new Error("user pressed escape"));
    const err = await client.listTurns({ signal: ctl.signal }).catch((e: unknown) => e);
    assert.equal((err as Error).message, "user pressed escape");
  });
});
