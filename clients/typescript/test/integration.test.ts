// Integration tests against the real host's router (pkg/host's
// TestTypeScriptClient serves it, with fake Docker and systemd, on a Unix
// socket with peer credentials, and runs this file with SANDBOX_HOST_SOCKET
// set; test/e2e's TestTypeScriptClientOnTheHost runs it against the
// installed host). Skipped without it.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";

import { ExecError, SandboxClient, SandboxError, type RunEvent, type Session } from "../src/index.js";

const socketPath = process.env.SANDBOX_HOST_SOCKET;
// The document the host must serve: the package's copy on an installed host.
const docPath = process.env.SANDBOX_OPENAPI || join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..", "pkg", "api", "openapi.json");

describe("against the host", { skip: socketPath ? false : "SANDBOX_HOST_SOCKET is not set (pkg/host's TestTypeScriptClient sets it)" }, () => {
  const c = new SandboxClient({ socketPath, timeoutMs: 30_000 });

  it("health: ok, and this process is the host's own uid (admin)", async () => {
    const h = await c.health();
    assert.deepEqual([h.status, h.accepting, h.role], ["ok", true, "admin"]);
  });

  it("serves the OpenAPI document the client was generated from", async () => {
    assert.deepEqual(await c.openapi(), JSON.parse(readFileSync(docPath, "utf8")));
  });

  it("runs a command: its events stream to the result, with output and artifacts", async () => {
    const seen: RunEvent[] = [];
    const st = await c.runToEnd({ command: "echo hello; printf data:a.txt > /output/a.txt", artifacts: ["a.txt"] }, { onEvent: (ev) => seen.push(ev) });
    assert.equal(st.result, "ok");
    assert.equal(st.exitCode, 0);
    assert.equal(st.stdout, "hello\n");
    assert.deepEqual(st.artifacts?.map((a) => [a.path, Buffer.from(a.data ?? "", "base64").toString()]), [["a.txt", "data:a.txt"]]);
    assert.equal(seen.at(-1)?.type, "result");
    assert.ok(seen.some((ev) => ev.type === "output" && Buffer.from(ev.data ?? "", "base64").toString() === "hello\n"));
    assert.equal((await c.run(st.id)).result, "ok");
    assert.ok((await c.listRuns()).runs.some((r) => r.id === st.id));
  });

  it("a network run waits for approval; an admin denies it", async () => {
    const st = await c.startRun({ command: "curl x", network: true });
    assert.equal(st.state, "awaiting_approval");
    const denied = await c.denyRun(st.id);
    assert.equal(denied.result, "denied");
  });

  it("answers a refusal with its status and reason", async () => {
    const notFound = await c.run("f".repeat(32)).catch((e: unknown) => e);
    assert.ok(notFound instanceof SandboxError);
    assert.deepEqual([notFound.status, notFound.reason], [404, "no such run"]);
    const bad = await c.startRun({ command: "a", executable: "b" }).catch((e: unknown) => e);
    assert.ok(bad instanceof SandboxError);
    assert.equal(bad.status, 400);
    const badID = await c.run("nothex").catch((e: unknown) => e);
    assert.deepEqual([(badID as SandboxError).status, (badID as SandboxError).reason], [400, "bad run id: 32 lowercase hex characters"]);
  });

  it("escapes a channel key with a slash", async () => {
    const st = await c.channel("guild/1234");
    assert.equal(st.channel, "guild/1234");
    assert.ok(Array.isArray((await c.listChannels()).channels));
    assert.ok(Array.isArray((await c.listTurns()).turns));
  });

  it("streams a channel's job events until it is cancelled", async () => {
    const ctl = new AbortController();
    const err = await (async () => {
      for await (const ev of c.jobEvents("guild/1234", { signal: ctl.signal })) {
        assert.equal(ev.type, "keepalive");
        ctl.abort(new Error("enough"));
      }
    })().catch((e: unknown) => e);
    assert.equal((err as Error).message, "enough");
  });

  it("lists sessions, and answers one that does not exist with 404", async () => {
    assert.ok(Array.isArray((await c.listSessions()).sessions));
    const err = await c.session("f".repeat(32)).catch((e: unknown) => e);
    assert.ok(err instanceof SandboxError);
    assert.equal(err.status, 404);
  });

  it("reads the metrics", async () => {
    assert.match(await c.metrics(), /^# HELP /m);
  });
});

// Sessions need a host with sessions.enabled and its toolbox image, and a
// real container to exec in: pkg/host's router test (fake Docker) cannot
// create one, so these skip there saying why; the e2e host runs them
// (SANDBOX_SESSIONS=required: a create that fails fails the test).
describe("sessions against the host", { skip: socketPath ? false : "SANDBOX_HOST_SOCKET is not set (pkg/host's TestTypeScriptClient sets it)" }, () => {
  const c = new SandboxClient({ socketPath, timeoutMs: 120_000 });
  const required = process.env.SANDBOX_SESSIONS === "required";
  let s: Session | undefined;
  let why = "";

  before(async () => {
    try {
      s = await c.createSession({ ttlSeconds: 600 });
    } catch (err) {
      if (required) throw err;
      why = `this host cannot create a session (${err instanceof Error ? err.message : String(err)}): sessions.enabled and the toolbox image are needed; test/e2e runs these`;
    }
  });
  after(async () => {
    if (s) await c.closeSession(s.id).catch(() => {});
  });

  it("creates a running session the caller owns and lists it", async (t) => {
    if (!s) return t.skip(why);
    assert.equal(s.state, "running");
    assert.equal((await c.session(s.id)).id, s.id);
    assert.ok((await c.listSessions()).sessions.some((x) => x.id === s?.id));
  });

  it("keeps a file from one exec to the next, with both streams and the exit code", async (t) => {
    if (!s) return t.skip(why);
    const w = await c.execToEnd(s.id, { command: "printf kept > note.txt; echo out; echo err >&2; exit 3" });
    assert.deepEqual([w.result.exitCode, w.stdout.toString(), w.stderr.toString()], [3, "out\n", "err\n"]);
    const r = await c.execToEnd(s.id, { executable: "cat", args: ["note.txt"] });
    assert.deepEqual([r.result.exitCode, r.stdout.toString()], [0, "kept"]);
  });

  it("puts, gets, lists and tars files", async (t) => {
    if (!s) return t.skip(why);
    const put = await c.putFile(s.id, "bytes.bin", new Uint8Array([0, 255, 10]), 0o600);
    assert.equal(put.size, 3);
    const got = await c.getFile(s.id, "bytes.bin");
    assert.deepEqual([...got.data], [0, 255, 10]);
    const ls = await c.listFiles(s.id, ".");
    assert.ok(ls.entries.some((e) => e.name === "bytes.bin" && e.type === "file" && e.size === 3), JSON.stringify(ls));
    const tar = await c.getTar(s.id, ".");
    assert.ok(tar.data.length >= 512, `a tar of ${tar.data.length} bytes`);
  });

  it("pauses and resumes", async (t) => {
    if (!s) return t.skip(why);
    assert.equal((await c.pauseSession(s.id)).state, "paused");
    assert.equal((await c.resumeSession(s.id)).state, "running");
  });

  it("a network exec in a session without network is refused before it starts", async (t) => {
    if (!s) return t.skip(why);
    const err = await c.execToEnd(s.id, { command: "true", network: true }).catch((e: unknown) => e);
    assert.ok(err instanceof SandboxError || err instanceof ExecError, String(err));
  });

  it("an exec cancelled while it runs ends cancelled", async (t) => {
    if (!s) return t.skip(why);
    const id = s.id;
    const got = await c.execToEnd(id, { command: "sleep 600" }, {
      onEvent: async (ev) => {
        if (ev.type === "started") await c.cancelExec(id, ev.execId);
      },
    });
    assert.equal(got.result.cancelled, true);
  });

  it("closes: the session is gone", async (t) => {
    if (!s) return t.skip(why);
    const id = s.id;
    await c.closeSession(id);
    s = undefined;
    const err = await c.session(id).catch((e: unknown) => e);
    assert.ok(err instanceof SandboxError);
    assert.equal(err.status, 404);
  });
});
