// @modelcontextprotocol/client (Node, 2.x): Client over StreamableHTTPClientTransport
// calls SSE_PROXY_MCP_TOOL with SSE_PROXY_MCP_ARGS and an onprogress callback, prints the
// result's text content, and ends the session (DELETE) where it has one. argv[2]: the
// revision, 2025-11-25 (the default, versionNegotiation "legacy") or 2026-07-28 (pinned
// with versionNegotiation: {mode: {pin}}, the opt-in to the stateless revision).
// CONFORMANCE_TIMEOUT (seconds): the request's timeout option (ms; the SDK's is 60 s).
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const revision = process.argv[2] ?? "2025-11-25";
const timeout = process.env.CONFORMANCE_TIMEOUT;
const negotiation = revision >= "2026-07-28" ? { versionNegotiation: { mode: { pin: revision } } } : {};
const client = new Client({ name: "sse-proxy-conformance", version: "1.0.0" }, negotiation);
const transport = new StreamableHTTPClientTransport(new URL(process.env.SSE_PROXY_STREAM_URL));
await client.connect(transport);
const result = await client.callTool(
  { name: process.env.SSE_PROXY_MCP_TOOL, arguments: JSON.parse(process.env.SSE_PROXY_MCP_ARGS) },
  { onprogress: () => {}, ...(timeout === undefined ? {} : { timeout: Number(timeout) * 1000 }) },
);
const text = result.content.filter((c) => c.type === "text").map((c) => c.text).join("");
if (transport.sessionId) await transport.terminateSession();
await client.close();
if (result.isError) {
  console.error("the tool failed");
  process.exit(1);
}
process.stdout.write(text);
