// The browser's own EventSource with the only deadline it can have: a watchdog timer that
// every message resets (1.5 s); when it fires, the source is closed and the answer rejected.
export default function stream({ url }) {
  return new Promise((resolve, reject) => {
    const source = new EventSource(url);
    let text = "";
    let watchdog;
    const watch = () => {
      clearTimeout(watchdog);
      watchdog = setTimeout(() => { source.close(); reject(new Error("no message for 1.5 s")); }, 1500);
    };
    watch();
    source.onmessage = (event) => { watch(); text += event.data; };
    source.onerror = () => { clearTimeout(watchdog); source.close(); resolve(text); };
  });
}
