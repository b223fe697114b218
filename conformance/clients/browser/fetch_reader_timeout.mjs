// The fetch client of fetch_reader.mjs with a deadline on the whole answer:
// fetch(url, {signal: AbortSignal.timeout(1500)}).
import { stream } from "./fetch_reader.mjs";

export default function timed(args) {
  return stream({ ...args, signal: AbortSignal.timeout(1500) });
}
