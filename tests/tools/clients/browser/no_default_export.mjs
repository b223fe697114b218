// A client module wired wrong for the harness: its function is a named export only.
export async function stream({ url, body, headers }) {
  const response = await fetch(url, { method: "POST", headers, body });
  return await response.text();
}
