// The TypeScript SDK's clients as an oracle (issue 26): one run of the same request sequence per
// client and era against one MCP endpoint, one JSON line per step on stdout.
//
//   node oracle.mjs URL PREFIX
//     URL     the streamable-HTTP endpoint (an SDK server directly, or the gateway in front of it)
//     PREFIX  what the endpoint puts before the server's tool and prompt names ("" directly,
//             "up__" through the gateway)
//
// Clients: the v1 SDK (@modelcontextprotocol/sdk, 2025-11-25 only) and the v2 client package
// (@modelcontextprotocol/client) pinned to 2025-11-25 ("legacy") and to 2026-07-28. Each line is
// {"client", "step", "result"} or {"client", "step", "error": {code, message, data}}: what the
// client's API returned or threw. The test compares the two runs' lines; this script judges
// nothing. Every request has a timeout, so a hung server ends the run instead of the test.
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport as TransportV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { Client as ClientV2, StreamableHTTPClientTransport as TransportV2 } from "@modelcontextprotocol/client";

const [url, prefix = ""] = process.argv.slice(2);
if (!url) {
  console.error("usage: node oracle.mjs URL PREFIX");
  process.exit(2);
}
const TIMEOUT = { timeout: 15000 };
const INFO = { name: "ts-oracle", version: "1.0.0" };

function out(client, step, outcome) {
  process.stdout.write(JSON.stringify({ client, step, ...outcome }) + "\n");
}

function failure(err) {
  // ProtocolError (v2) and McpError (v1) carry the JSON-RPC error; anything else is the client's own.
  if (err && typeof err.code === "number") {
    return { error: { code: err.code, message: err.message, data: err.data ?? null } };
  }
  return { error: { code: null, message: String(err && err.message ? err.message : err), data: null } };
}

async function step(client, name, run) {
  try {
    out(client, name, { result: await run() });
  } catch (err) {
    out(client, name, failure(err));
  }
}

/** The sequence: every method the gateway serves to these clients, errors included. */
async function sequence(tag, client, modern) {
  const p = (name) => prefix + name;
  // v1's callTool takes a result schema before the options; v2's takes the options.
  const call = (params) => (client instanceof ClientV1 ? client.callTool(params, undefined, TIMEOUT) : client.callTool(params, TIMEOUT));
  if (!modern) {
    // The v2 client refuses these itself on a 2026-07-28 connection (ping and logging/setLevel
    // are not in that version's surface): nothing would reach the server.
    await step(tag, "ping", () => client.ping(TIMEOUT));
    await step(tag, "logging/setLevel", () => client.setLoggingLevel("warning", TIMEOUT));
  }
  await step(tag, "tools/list", () => client.listTools({}, TIMEOUT));
  await step(tag, "tools/call echo", () => call({ name: p("echo"), arguments: { x: 1, nested: { k: [1, "two", null] } } }));
  await step(tag, "tools/call error result", () => call({ name: p("fail"), arguments: { text: "tool said no" } }));
  await step(tag, "tools/call unknown tool", () => call({ name: p("nope"), arguments: {} }));
  await step(tag, "resources/list", () => client.listResources({}, TIMEOUT));
  await step(tag, "resources/templates/list", () => client.listResourceTemplates({}, TIMEOUT));
  await step(tag, "resources/read", () => client.readResource({ uri: "note://7" }, TIMEOUT));
  await step(tag, "prompts/list", () => client.listPrompts({}, TIMEOUT));
  await step(tag, "prompts/get", () => client.getPrompt({ name: p("greet"), arguments: { name: "ada" } }, TIMEOUT));
  await step(tag, "prompts/get unknown", () => client.getPrompt({ name: p("nope"), arguments: {} }, TIMEOUT));
  await step(tag, "completion/complete prompt", () =>
    client.complete({ ref: { type: "ref/prompt", name: p("greet") }, argument: { name: "name", value: "a" } }, TIMEOUT),
  );
  await step(tag, "completion/complete template", () =>
    client.complete(
      { ref: { type: "ref/resource", uri: "note://{id}" }, argument: { name: "id", value: "1" } },
      TIMEOUT,
    ),
  );
  if (modern) {
    await step(tag, "server/discover", () => client.discover(TIMEOUT));
  }
}

async function run(tag, client, transport, modern) {
  try {
    await client.connect(transport, TIMEOUT);
  } catch (err) {
    out(tag, "connect", failure(err));
    return;
  }
  const era = typeof client.getNegotiatedProtocolVersion === "function" ? client.getNegotiatedProtocolVersion() : transport.protocolVersion;
  out(tag, "connect", { result: { protocolVersion: era ?? null, instructions: client.getInstructions() ?? null } });
  try {
    await sequence(tag, client, modern);
  } finally {
    await client.close();
  }
}

const target = new URL(url);
await run("sdk-v1 2025-11-25", new ClientV1(INFO), new TransportV1(target), false);
await run(
  "client-v2 2025-11-25",
  new ClientV2(INFO, { versionNegotiation: { mode: "legacy" } }),
  new TransportV2(target),
  false,
);
await run(
  "client-v2 2026-07-28",
  new ClientV2(INFO, { versionNegotiation: { mode: { pin: "2026-07-28" } } }),
  new TransportV2(target),
  true,
);
