// Replicates an LDES with ldes-client (the reference client, rdf-connect) used as a library,
// and writes each member it emits as one JSON line: {"id", "quads"} with quads as N-Quads.
// Usage: node ldes_replicate.js URL [user:password]
import { replicateLDES, intoConfig } from "ldes-client";
import { Writer } from "n3";

const [url, credentials] = process.argv.slice(2);
const headers = credentials ? { Authorization: "Basic " + Buffer.from(credentials).toString("base64") } : {};
const fetchWithAuth = (input, init = {}) =>
  fetch(input, { ...init, headers: { ...(init.headers || {}), ...headers } });

const client = replicateLDES(intoConfig({ url, fetch: fetchWithAuth }), "ascending");
const reader = client.stream({ highWaterMark: 10 }).getReader();
for (;;) {
  const { value, done } = await reader.read();
  if (done) break;
  const writer = new Writer({ format: "N-Quads" });
  const text = writer.quadsToString(value.quads);
  process.stdout.write(JSON.stringify({ id: value.id.value, quads: text }) + "\n");
}
