#!/usr/bin/env node
// mcp-run-client.mjs: a real MCP client (the official TypeScript SDK,
// @modelcontextprotocol/sdk, pinned in test/peers/package.json) that no one
// here wrote, for interop tests of `sandbox-host mcp` (package runmcp).
//
// Usage:
//   node test/peers/mcp-run-client.mjs [--call JSON] [--elicit MODE] [--progress]
//        [--timeout-ms N] -- COMMAND [ARG...]
//
// It spawns COMMAND ARG... as an MCP server over stdio (StdioClientTransport;
// the server gets this process's whole environment, its stderr passes
// through to ours), initializes, lists the tools, and, with --call, calls
// sandbox_run with JSON as its arguments. Options:
//   --call JSON      sandbox_run's arguments, e.g. '{"command":"echo hi"}'
//   --elicit MODE    none (default: the client declares NO elicitation
//                    capability), accept (answers {allow: true}), decline,
//                    cancel
//   --progress       ask for progress (a progress token) and record the
//                    notifications
//   --timeout-ms N   bound of each request (default 600000)
//
// Prints ONE JSON object on stdout:
//   {"protocolVersion": "...", "server": {name, version, ...},
//    "tools": [...tools/list's tools...],
//    "result": <the CallToolResult, or null without --call>,
//    "elicitations": [{"message": ..., "requestedSchema": ...}],
//    "progress": [{"progress": n, "message": "..."}]}
// Exit status: 0 when the exchange completed (a tool error included: see
// result.isError), 1 on a protocol or transport error (message on stderr),
// 2 on a usage error.
//
// Example (against the installed host, as a user of the sandbox group):
//   node test/peers/mcp-run-client.mjs --call '{"command":"id -u"}' -- sandbox-host mcp --project demo

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

function usage(msg) {
	process.stderr.write(`mcp-run-client: ${msg}\nusage: mcp-run-client.mjs [--call JSON] [--elicit none|accept|decline|cancel] [--progress] [--timeout-ms N] -- COMMAND [ARG...]\n`);
	process.exit(2);
}

const argv = process.argv.slice(2);
let callArgs = null;
let elicit = 'none';
let progress = false;
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
	} else if (a === '--call') {
		try {
			callArgs = JSON.parse(value());
		} catch (e) {
			usage(`--call: not JSON: ${e.message}`);
		}
	} else if (a === '--elicit') {
		elicit = value();
		if (!['none', 'accept', 'decline', 'cancel'].includes(elicit)) usage(`--elicit ${elicit}: want none, accept, decline or cancel`);
	} else if (a === '--progress') {
		progress = true;
	} else if (a === '--timeout-ms') {
		timeoutMs = Number(value());
		if (!Number.isInteger(timeoutMs) || timeoutMs <= 0) usage('--timeout-ms: want a positive integer');
	} else {
		usage(`unknown option ${a}`);
	}
}
if (!server || server.length === 0) usage('no server command after --');

const out = { protocolVersion: null, server: null, tools: [], result: null, elicitations: [], progress: [] };
const capabilities = elicit === 'none' ? {} : { elicitation: { form: {} } };
const client = new Client({ name: 'mcp-run-client', version: '1.0.0' }, { capabilities });
if (elicit !== 'none') {
	client.setRequestHandler(ElicitRequestSchema, async (req) => {
		out.elicitations.push({ message: req.params.message, requestedSchema: req.params.requestedSchema ?? null });
		if (elicit === 'accept') return { action: 'accept', content: { allow: true } };
		return { action: elicit };
	});
}

const transport = new StdioClientTransport({
	command: server[0],
	args: server.slice(1),
	env: { ...process.env },
	stderr: 'inherit',
});

// The client hands the negotiated revision to transports that want it.
transport.setProtocolVersion = (v) => {
	out.protocolVersion = v;
};

try {
	await client.connect(transport, { timeout: timeoutMs });
	out.server = client.getServerVersion() ?? null;
	const listed = await client.listTools(undefined, { timeout: timeoutMs });
	out.tools = listed.tools;
	if (callArgs !== null) {
		const opts = { timeout: timeoutMs };
		if (progress) {
			opts.onprogress = (p) => out.progress.push({ progress: p.progress, message: p.message ?? '' });
			opts.resetTimeoutOnProgress = true;
		}
		out.result = await client.callTool({ name: 'sandbox_run', arguments: callArgs }, undefined, opts);
	}
} catch (e) {
	process.stderr.write(`mcp-run-client: ${e?.message ?? e}\n`);
	await client.close().catch(() => {});
	process.exit(1);
}
await client.close();
process.stdout.write(JSON.stringify(out) + '\n');
process.exit(0);
