#!/usr/bin/env node
// mcp-session-client.mjs: a real MCP client (the official TypeScript SDK,
// @modelcontextprotocol/sdk, pinned in test/peers/package.json) that drives
// a sandbox session through `sandbox-host mcp` (package runmcp's session
// tools), for the e2e scenario TestSessionFromMCPClient and make demo.
//
// Usage:
//   node test/peers/mcp-session-client.mjs --steps JSON [--timeout-ms N] -- COMMAND [ARG...]
//
// It spawns COMMAND ARG... as an MCP server over stdio, initializes, lists
// the tools, then calls each step of JSON, an array of
// {"tool": NAME, "arguments": {...}}, in order. The string "$SESSION" in
// any argument value is replaced by the session id the first
// sandbox_session_start step returned (its structuredContent.id). A step
// whose result is a tool error does not stop the others.
//
// Prints ONE JSON object on stdout:
//   {"protocolVersion": "...", "server": {...}, "tools": [...],
//    "session": "<id or null>", "results": [<CallToolResult per step>]}
// Exit status: 0 when every step was called (tool errors included: see
// results[i].isError), 1 on a protocol or transport error (message on
// stderr), 2 on a usage error.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

function usage(msg) {
	process.stderr.write(`mcp-session-client: ${msg}\nusage: mcp-session-client.mjs --steps JSON [--timeout-ms N] -- COMMAND [ARG...]\n`);
	process.exit(2);
}

const argv = process.argv.slice(2);
let steps = null;
let timeoutMs = 600000;
let server = null;
for (let i = 0; i < argv.length; i++) {
	const a = argv[i];
	const value = () => {
		if (i + 1 >= argv.length) usage(`${a} needs a value`);
		return argv[++i];
	};
	if (a === '--') {
		server = argv.slice(i + 1);
		break;
	} else if (a === '--steps') {
		try {
			steps = JSON.parse(value());
		} catch (e) {
			usage(`--steps: not JSON: ${e.message}`);
		}
		if (!Array.isArray(steps) || steps.some((s) => typeof s?.tool !== 'string')) usage('--steps: want an array of {"tool": NAME, "arguments": {...}}');
	} else if (a === '--timeout-ms') {
		timeoutMs = Number(value());
		if (!Number.isInteger(timeoutMs) || timeoutMs <= 0) usage('--timeout-ms: want a positive integer');
	} else {
		usage(`unknown option ${a}`);
	}
}
if (!steps) usage('--steps is required');
if (!server || server.length === 0) usage('no server command after --');

// substitute replaces "$SESSION" in every string of v.
function substitute(v, session) {
	if (typeof v === 'string') return v.split('$SESSION').join(session ?? '');
	if (Array.isArray(v)) return v.map((x) => substitute(x, session));
	if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, substitute(x, session)]));
	return v;
}

const out = { protocolVersion: null, server: null, tools: [], session: null, results: [] };
const client = new Client({ name: 'mcp-session-client', version: '1.0.0' }, { capabilities: {} });
const transport = new StdioClientTransport({
	command: server[0],
	args: server.slice(1),
	env: { ...process.env },
	stderr: 'inherit',
});
transport.setProtocolVersion = (v) => {
	out.protocolVersion = v;
};

try {
	await client.connect(transport, { timeout: timeoutMs });
	out.server = client.getServerVersion() ?? null;
	out.tools = (await client.listTools(undefined, { timeout: timeoutMs })).tools;
	for (const step of steps) {
		const res = await client.callTool({ name: step.tool, arguments: substitute(step.arguments ?? {}, out.session) }, undefined, { timeout: timeoutMs });
		if (step.tool === 'sandbox_session_start' && out.session === null && !res.isError) {
			out.session = res.structuredContent?.id ?? null;
		}
		out.results.push(res);
	}
} catch (e) {
	process.stderr.write(`mcp-session-client: ${e?.message ?? e}\n`);
	await client.close().catch(() => {});
	process.exit(1);
}
await client.close();
process.stdout.write(JSON.stringify(out) + '\n');
process.exit(0);
