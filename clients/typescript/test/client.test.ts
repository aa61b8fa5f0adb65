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

import { operationTable, SandboxClient, SandboxError, type OperationId } from "../src/index.js";

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
    ["postDelegation", (c) => c.delegate("g:1", { title: "t", task: "x", author: { id: "u", name: "Ada" } }), "/v1/channels/g%3A1/delegations", { title: "t", task: "x", author: { id: "u", name: "Ada" } }],
    ["jobEvents", async (c) => { for await (const _ of c.jobEvents("g:1")) { /* drain */ } }, "/v1/channels/g%3A1/jobs/events"],
    ["getJob", (c) => c.job(run), `/v1/jobs/${run}`],
    ["postPrecheck", (c) => c.precheck({ channel: "g:1", script: "1" }), "/v1/prechecks", { channel: "g:1", script: "1" }],
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
      assert.deepEqual(seen[0].body === "" ? undefined : JSON.parse(seen[0].body), body);
    });
  }
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
