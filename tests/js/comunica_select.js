// Runs a SELECT query with Comunica (@comunica/query-sparql 4, used as a library) and prints
// its bindings as one JSON array of {variable: value}.
// Usage: node comunica_select.js SOURCE_TYPE SOURCE_URL QUERY [user:password]
//   SOURCE_TYPE: "sparql" (a SPARQL endpoint) or "auto" (a document, by content negotiation)
const { QueryEngine } = require("@comunica/query-sparql");

async function main() {
  const [type, url, query, auth] = process.argv.slice(2);
  const source = type === "auto" ? url : { type, value: url };
  const context = { sources: [source], lenient: false };
  if (auth) context.httpAuth = auth;
  const stream = await new QueryEngine().queryBindings(query, context);
  const rows = (await stream.toArray()).map((b) => Object.fromEntries([...b].map(([k, v]) => [k.value, v.value])));
  process.stdout.write(JSON.stringify(rows) + "\n");
}

main().catch((error) => {
  process.stderr.write(String(error && error.stack || error) + "\n");
  process.exit(1);
});
