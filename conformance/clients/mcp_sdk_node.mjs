// @modelcontextprotocol/sdk (Node, 1.x): Client over StreamableHTTPClientTransport
// (2025-11-25 is the newest revision it speaks) calls SSE_PROXY_MCP_TOOL with
// SSE_PROXY_MCP_ARGS and an onprogress callback (it asks for progress), prints the
// result's text content, and ends the session (DELETE).
// CONFORMANCE_TIMEOUT (seconds): the request's timeout option (ms; the SDK's is 60 s).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const timeout = process.env.CONFORMANCE_TIMEOUT;
const client = new Client({ name: "sse-proxy-conformance", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(process.env.SSE_PROXY_STREAM_URL));
await client.connect(transport);
const result = await client.callTool(
  { name: process.env.SSE_PROXY_MCP_TOOL, arguments: JSON.parse(process.env.SSE_PROXY_MCP_ARGS) },
  undefined,
  { onprogress: () => {}, ...(timeout === undefined ? {} : { timeout: Number(timeout) * 1000 }) },
);
const text = result.content.filter((c) => c.type === "text").map((c) => c.text).join("");
await transport.terminateSession();
await client.close();
if (result.isError) {
  console.error("the tool failed");
  process.exit(1);
}
process.stdout.write(text);
