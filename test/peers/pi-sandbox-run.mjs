#!/usr/bin/env node
// pi-sandbox-run.mjs: the real Pi coding agent (@mariozechner/pi-coding-agent,
// pinned in test/peers/package.json) with the Pi extension
// (clients/pi-extension), in print mode, against a sandbox host's socket.
// The model is ours: a loopback OpenAI-compatible chat completions server
// (registered as Pi provider "loopback" in a private agent dir) scripted to
// make a scenario's tool calls one after the other (sandbox_run once, or the
// session tools in turn), then to answer with the first line of the last
// tool result. The tool results Pi records in its session file are checked.
//
// Usage: node test/peers/pi-sandbox-run.mjs SOCKET [PROJECT]
// PI_EXTENSION_DIR: the extension's folder (default clients/pi-extension
// beside this checkout's test/peers).
//
// It packs the extension (npm pack: its built dist and the bundled client;
// run `npm ci && npm test` there first), unpacks the tarball and
// installs it with `pi install -l` into a temporary project folder, then
// runs the scenarios: a shell run, an argv run with an artifact, a setup
// run, a network run (print mode has no UI: refused, no run created) and a
// run the host refuses (timeout_seconds 999999: a clear tool error), and a
// session (start, an exec writing a file, an exec reading it, close). A
// host that cannot create a session (pkg/host's router: fake Docker) skips
// that one, saying why.
// Prints one line per scenario ("ok NAME", "skip NAME: why" or "FAIL NAME:
// why") and exits 0 when none failed, 1 otherwise, 2 on a usage or setup
// error.
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..");
const [socket, project] = process.argv.slice(2);
if (!socket) {
  console.error("usage: pi-sandbox-run.mjs SOCKET [PROJECT]");
  process.exit(2);
}
const pi = join(here, "node_modules", ".bin", "pi");
const extDir = process.env.PI_EXTENSION_DIR || join(root, "clients", "pi-extension");
// The client the extension bundles (its npm ci copies it: install-links).
const clientEntry = join(extDir, "node_modules", "@roundtable-sandbox", "client", "dist", "src", "index.js");
for (const [p, why] of [
  [pi, "Pi is not installed: npm ci --prefix test/peers"],
  [join(extDir, "dist", "src", "index.js"), "the extension is not built: npm ci && npm test in clients/pi-extension"],
  [clientEntry, "the extension's client is not installed: npm ci in the extension's folder"],
]) {
  if (!existsSync(p)) {
    console.error(`pi-sandbox-run: ${why}`);
    process.exit(2);
  }
}
const { SandboxClient } = await import(clientEntry);
const client = new SandboxClient({ socketPath: socket, timeoutMs: 30_000 });

// The scripted model: the scenario's next tool call, given the texts of the
// tool results so far (steps: [tool name, arguments or a function of those
// texts]); once the steps are done, the last tool result's first line.
let steps = [];
const model = http.createServer((req, res) => {
  let body = "";
  req.on("data", (c) => (body += c));
  req.on("end", () => {
    const r = JSON.parse(body || "{}");
    const said = (r.messages ?? []).filter((m) => m.role === "tool").map((m) => (typeof m.content === "string" ? m.content : JSON.stringify(m.content)));
    const chunk = (delta, finish) =>
      `data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 0, model: "scripted", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    res.writeHead(200, { "Content-Type": "text/event-stream" });
    const step = steps[said.length];
    if (!step) {
      res.write(chunk({ role: "assistant", content: "tool said: " + (said.at(-1) ?? "").split("\n")[0] }, null));
      res.write(chunk({}, "stop"));
    } else {
      const [name, a] = step;
      const call = { index: 0, id: `call_${said.length + 1}`, type: "function", function: { name, arguments: JSON.stringify(typeof a === "function" ? a(said) : a) } };
      res.write(chunk({ role: "assistant", tool_calls: [call] }, null));
      res.write(chunk({}, "tool_calls"));
    }
    res.end("data: [DONE]\n\n");
  });
});
await new Promise((r) => model.listen(0, "127.0.0.1", r));
const port = model.address().port;

const work = mkdtempSync(join(tmpdir(), "pi-sandbox-run-"));
const agentDir = join(work, "agent");
const proj = join(work, "project");
mkdirSync(agentDir);
mkdirSync(proj);
writeFileSync(
  join(agentDir, "models.json"),
  JSON.stringify({
    providers: {
      loopback: {
        baseUrl: `http://127.0.0.1:${port}/v1`,
        api: "openai-completions",
        apiKey: "none",
        compat: { supportsDeveloperRole: false, supportsReasoningEffort: false },
        models: [{ id: "scripted", reasoning: false }],
      },
    },
  }),
);
const env = { ...process.env, PI_CODING_AGENT_DIR: agentDir, PI_OFFLINE: "1" };
delete env.ROUNDTABLE_SANDBOX_SOCKET;
delete env.ROUNDTABLE_SANDBOX_PROJECT;

let failed = 0;
try {
  // pi install of the extension from its tarball (unpacked: Pi names an
  // npm: source by its spec, which for a tarball path is no package name).
  const tgz = execFileSync("npm", ["pack", "--silent", "--pack-destination", work], { cwd: extDir, encoding: "utf8" }).trim().split("\n").at(-1);
  execFileSync("tar", ["xzf", join(work, tgz), "-C", work]);
  execFileSync(pi, ["install", "-l", join(work, "package")], { cwd: proj, env, stdio: "ignore" });

  const flags = ["--sandbox-socket", socket, ...(project ? ["--sandbox-project", project] : [])];
  const runPi = (scenarioSteps) =>
    new Promise((resolve, reject) => {
      steps = scenarioSteps;
      const sessions = mkdtempSync(join(work, "sessions-"));
      const p = spawn(pi, ["-p", "--provider", "loopback", "--model", "scripted", "--session-dir", sessions, ...flags, "run the sandbox"], { cwd: proj, env, stdio: ["ignore", "pipe", "pipe"] });
      let out = "";
      p.stdout.on("data", (c) => (out += c));
      p.stderr.on("data", (c) => (out += c));
      const timer = setTimeout(() => p.kill("SIGKILL"), 300_000);
      p.on("error", reject);
      p.on("close", (code) => {
        clearTimeout(timer);
        const files = readdirSync(sessions).filter((f) => f.endsWith(".jsonl"));
        const entries = files.flatMap((f) => readFileSync(join(sessions, f), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l)));
        const results = entries.filter((e) => e.type === "message" && e.message.role === "toolResult" && e.message.toolName?.startsWith("sandbox_")).map((e) => e.message);
        resolve({ code, out, results });
      });
    });
  const text = (r) => r.content.map((c) => c.text ?? "").join("");
  const runCount = async () => (await client.listRuns()).runs.length;

  const scenarios = [
    ["shell run", { command: "echo hello" }, (r) => !r.isError && /: ok, exit code 0/.test(text(r)) && /stdout:\nhello\n/.test(text(r))],
    [
      "argv run with an artifact",
      { executable: "python3", args: ["-c", "open('/output/out.txt','w').write('hi')"], artifacts: ["out.txt"] },
      (r) => {
        const m = /written to (sandbox-output\/[0-9a-f]{32}\/out\.txt)/.exec(text(r));
        return !r.isError && m !== null && readFileSync(join(proj, m[1])).length > 0;
      },
    ],
    ["setup run", { command: "echo hello", setup: ["true"] }, (r) => !r.isError && /: ok, exit code 0/.test(text(r))],
    ["network run without a UI", { command: "curl -sS http://example.com/", network: true }, (r) => r.isError && /no UI/.test(text(r)), true],
    ["a run the host refuses", { command: "true", timeout_seconds: 999999 }, (r) => r.isError && /the sandbox host refused the run \(400\)/.test(text(r))],
  ].map(([name, a, check, createsNoRun]) => [name, [["sandbox_run", a]], ([r]) => check(r), createsNoRun]);
  // A session across tool calls: the id start returns, a file one exec
  // writes and the next reads, then close (the session is gone after).
  const sid = (said) => /session ([0-9a-f]{32}) started/.exec(said[0] ?? "")?.[1] ?? "none";
  scenarios.push([
    "session: start, exec writes, exec reads, close",
    [
      ["sandbox_session_start", { ttl_seconds: 600 }],
      ["sandbox_exec", (said) => ({ session_id: sid(said), command: "echo kept-across-calls > note.txt" })],
      ["sandbox_exec", (said) => ({ session_id: sid(said), executable: "cat", args: ["note.txt"] })],
      ["sandbox_session_close", (said) => ({ session_id: sid(said) })],
    ],
    (rs) =>
      rs.length === 4 &&
      rs.every((r) => !r.isError) &&
      /^session [0-9a-f]{32} started/.test(text(rs[0])) &&
      /^exit code 0/.test(text(rs[1])) &&
      /stdout:\nkept-across-calls\n/.test(text(rs[2])) &&
      text(rs[3]) === "session closed",
    false,
    // The host must be able to make one: a probe says so, else skip.
    async () => {
      try {
        const s = await client.createSession({ ttlSeconds: 60 });
        await client.closeSession(s.id);
        return "";
      } catch (err) {
        return `this host cannot create a session (${err.message})`;
      }
    },
  ]);
  for (const [name, scenarioSteps, check, createsNoRun, precondition] of scenarios) {
    const skip = precondition ? await precondition() : "";
    if (skip) {
      console.log(`skip ${name}: ${skip}`);
      continue;
    }
    const before = createsNoRun ? await runCount() : 0;
    const { code, out, results } = await runPi(scenarioSteps);
    let why = "";
    if (results.length !== scenarioSteps.length) why = `${results.length} sandbox tool results in the session, want ${scenarioSteps.length} (exit ${code}): ${out.slice(-500)}`;
    else if (!check(results)) why = `unexpected tool results: ${results.map((r) => `(isError ${r.isError}) ${text(r).slice(0, 300)}`).join(" | ")}`;
    else if (createsNoRun && (await runCount()) !== before) why = "a run was created";
    if (why) {
      failed++;
      console.log(`FAIL ${name}: ${why}`);
    } else {
      console.log(`ok ${name}`);
    }
  }
} catch (err) {
  console.error(`pi-sandbox-run: ${err.stack ?? err}`);
  failed = -1;
} finally {
  model.close();
  rmSync(work, { recursive: true, force: true });
}
process.exit(failed === -1 ? 2 : failed > 0 ? 1 : 0);
