// Integration tests against the real host's router (pkg/host's
// TestTypeScriptClient serves it, with fake Docker and systemd, on a Unix
// socket with peer credentials, and runs this file with SANDBOX_HOST_SOCKET
// set; test/e2e's TestTypeScriptClientOnTheHost runs it against the
// installed host). Skipped without it.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";

import { SandboxClient, SandboxError, type RunEvent } from "../src/index.js";

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

  it("reads the metrics", async () => {
    assert.match(await c.metrics(), /^# HELP /m);
  });
});
