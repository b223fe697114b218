// A raw MCP client in Node with the bug typescript-sdk#1233 fixed: it JSON.parse()s every
// event's data, so the priming event a 2025-11-25 server opens a stream with (an id and
// empty data) throws "Unexpected end of JSON input". Otherwise correct: the handshake,
// one tools/call of SSE_PROXY_MCP_TOOL, eventsource-parser, the result's text printed.
//
// node tests/tools/clients/mcp_parse_all.mjs  (under sse-proxy test-client --dialect mcp)
import { createParser } from 'eventsource-parser';

const url = process.env.SSE_PROXY_STREAM_URL;
const version = '2025-11-25';
const base = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' };

async function post(message, headers = {}) {
  return fetch(url, { method: 'POST', headers: { ...base, ...headers }, body: JSON.stringify(message) });
}

const init = await post({
  jsonrpc: '2.0', id: 0, method: 'initialize',
  params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 'parse-all', version: '1' } },
});
await init.json();
const session = { 'Mcp-Session-Id': init.headers.get('mcp-session-id'), 'MCP-Protocol-Version': version };
await (await post({ jsonrpc: '2.0', method: 'notifications/initialized' }, session)).text();
const resp = await post({
  jsonrpc: '2.0', id: 1, method: 'tools/call',
  params: { name: process.env.SSE_PROXY_MCP_TOOL, arguments: JSON.parse(process.env.SSE_PROXY_MCP_ARGS) },
}, session);
let answer = null;
const parser = createParser({
  onEvent(event) {
    const message = JSON.parse(event.data); // the bug: a priming event's data is ""
    if (message.id === 1 && ('result' in message || 'error' in message)) answer = message;
  },
});
const decoder = new TextDecoder();
for await (const chunk of resp.body) {
  parser.feed(decoder.decode(chunk, { stream: true }));
  if (answer) break;
}
if (!answer || answer.error) {
  console.error('no result', answer);
  process.exit(1);
}
process.stdout.write(answer.result.content.filter((c) => c.type === 'text').map((c) => c.text).join(''));
process.exit(0);
