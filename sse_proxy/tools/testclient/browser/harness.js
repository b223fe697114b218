// sse-proxy test-client's page: tell the harness what the page's code takes from each
// stream of the proxy, catch its console, then run the script under test.
//
// A browser's network process reads the socket, and the body stream still merges what it
// has not handed to the page yet; so the fetch() of a response from the proxy is given a
// body that reads the real one only when the page's code asks for more (a byte stream of
// high-water mark 0) and reports each read's size: the proxy waits on that before a cut,
// as it waits on the kernel for a local command. EventSource and XMLHttpRequest are left
// alone (their reads are not visible to the page): the kernel's wait is what there is.
const CONFIG = JSON.parse(document.getElementById("sse-proxy-case").textContent);
const socket = new WebSocket(CONFIG.ws);
const opened = new Promise((resolve, reject) => {
  socket.onopen = resolve;
  socket.onerror = () => reject(new Error("the harness's WebSocket did not open"));
});
const send = (message) => {
  try {
    socket.send(JSON.stringify(message));
  } catch {
    // the harness has gone: the case is over
  }
};

const show = (value) => {
  if (typeof value === "string") return value;
  if (value instanceof Error) return `${value.name}: ${value.message}`;
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
};
const stackOf = (err) => {
  if (!(err instanceof Error)) return `a rejection with a value that is not an Error: ${show(err)}`;
  const head = `${err.name}: ${err.message}`;
  const stack = String(err.stack || "");
  return stack.startsWith(head) ? stack : `${head}\n${stack}`;
};
for (const level of ["log", "info", "warn", "error", "debug"]) {
  const original = console[level].bind(console);
  console[level] = (...args) => {
    send({ console: level, text: args.map(show).join(" ") });
    original(...args);
  };
}
addEventListener("error", (e) => send({ console: "uncaught", text: e.error ? stackOf(e.error) : String(e.message) }));
addEventListener("unhandledrejection", (e) => send({ console: "unhandled rejection", text: stackOf(e.reason) }));

const nativeFetch = globalThis.fetch.bind(globalThis);
const nativeRead = ReadableStreamDefaultReader.prototype.read;
globalThis.fetch = async function fetch(input, init) {
  let url;
  try {
    url = new URL(input instanceof Request ? input.url : String(input), location.href);
  } catch {
    return nativeFetch(input, init);
  }
  if (url.origin !== CONFIG.proxy) return nativeFetch(input, init);
  send({ fetch: "start" });
  let response;
  try {
    response = await nativeFetch(input, init);
  } catch (err) {
    send({ fetch: "failed" });
    throw err;
  }
  const id = response.headers.get("x-sse-proxy-stream-id");
  if (!id || !response.body || response.type === "opaque") {
    send({ fetch: "unwatched" });
    return response;
  }
  send({ fetch: "open", id });
  const source = response.body.getReader();
  let taken = 0;
  const body = new ReadableStream(
    {
      type: "bytes",
      async pull(controller) {
        let got;
        try {
          got = await nativeRead.call(source);
        } catch (err) {
          controller.error(err);
          return;
        }
        if (got.done) {
          controller.close();
          controller.byobRequest?.respond(0);
          return;
        }
        taken += got.value.byteLength;
        send({ id, taken });
        controller.enqueue(got.value);
      },
      cancel(reason) {
        return source.cancel(reason);
      },
    },
    { highWaterMark: 0 },
  );
  const wrapped = new Response(body, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
  for (const key of ["url", "redirected", "type"]) {
    Object.defineProperty(wrapped, key, { value: response[key] });
  }
  return wrapped;
};

try {
  await opened;
  const module = await import(CONFIG.script);
  if (typeof module.default !== "function") {
    throw new TypeError(`${CONFIG.scriptName} has no default export that is a function`);
  }
  const { url, body, headers, dialect, case: name } = CONFIG;
  const value = await module.default({ url, body, headers, dialect, case: name });
  if (typeof value !== "string") {
    throw new TypeError(`the default export resolved to ${show(value)}, not a string`);
  }
  send({ result: value });
} catch (err) {
  send({ error: stackOf(err) });
}
