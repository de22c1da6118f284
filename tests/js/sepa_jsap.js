// SEPA's JavaScript client (@arces-wot/sepa-js) configured from the hub's JSAP, unchanged: it
// reads /jsap, subscribes to the JSAP's query QUERY_ID (the hub's WebSocket as the JSAP names
// it) and prints the first two notifications as JSON lines.
// Usage: node sepa_jsap.js HUB_URL TOKEN QUERY_ID
const SEPA = require("@arces-wot/sepa-js").SEPA;
const [hub, token, queryId] = process.argv.slice(2);
const out = (kind, value) => process.stdout.write(JSON.stringify({ kind, value }) + "\n");

(async () => {
  const jsap = await (await fetch(hub + "/jsap")).json();
  const client = new SEPA(jsap);
  const query = jsap.queries[queryId].sparql;
  const sub = client.subscribe(query, { options: { authorization: "Bearer " + token } }, queryId);
  let seen = 0;
  sub.on("notification", (n) => {
    out("notification", n);
    seen += 1;
    if (seen === 2) process.exit(0);
  });
  sub.on("error", (e) => { out("error", e); process.exit(2); });
  sub.on("connection-error", (e) => { out("connection-error", String(e)); process.exit(2); });
})();
setTimeout(() => process.exit(3), 60000);
