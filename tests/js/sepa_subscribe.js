// SEPA's JavaScript client (@arces-wot/sepa-js) against the hub's /subscribe, as a partner
// would use it: subscribe, print each notification as a JSON line, unsubscribe after the
// second; a second subscription with a broken query prints the error it gets.
// Usage: node sepa_subscribe.js HOST PORT TOKEN QUERY
const SEPA = require("@arces-wot/sepa-js").SEPA;
const [host, port, token, query] = process.argv.slice(2);

const client = new SEPA({
  host: host,
  sparql11protocol: { protocol: "http", port: Number(port), query: { path: "/sparql" }, update: { path: "/sparql" } },
  sparql11seprotocol: { protocol: "ws", availableProtocols: { ws: { port: Number(port), path: "/subscribe" } } },
});
const config = { options: { authorization: "Bearer " + token } };
const out = (kind, value) => process.stdout.write(JSON.stringify({ kind, value }) + "\n");

const broken = client.subscribe("SELECT WHERE {", config, "broken");
broken.on("error", (e) => out("error", e));

const sub = client.subscribe(query, config, "orders");
let seen = 0;
sub.on("notification", (n) => {
  out("notification", n);
  seen += 1;
  if (seen === 2) sub.unsubscribe();
});
sub.on("unsubscribed", (u) => { out("unsubscribed", u); setTimeout(() => process.exit(0), 100); });
sub.on("connection-error", (e) => { out("connection-error", String(e)); process.exit(2); });
setTimeout(() => { out("timeout", seen); process.exit(3); }, 60000);
