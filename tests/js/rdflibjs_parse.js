// Fetches a document in one syntax and parses it with rdflib.js; prints what it holds: {"statements": N, "defaultGraph": N} (statements in the store, and
// those in the document's default graph, which rdflib.js names by the document's URL).
// Usage: node rdflibjs_parse.js URL MEDIA_TYPE [bearer-token]
const $rdf = require("rdflib");

async function main() {
  const [url, mediaType, token] = process.argv.slice(2);
  const answer = await fetch(url, { headers: { Accept: mediaType, ...(token ? { Authorization: `Bearer ${token}` } : {}) } });
  if (!answer.ok) throw new Error(`${answer.status} ${await answer.text()}`);
  const store = $rdf.graph();
  const doc = $rdf.sym(url);
  const text = await answer.text();
  const type = answer.headers.get("content-type").split(";")[0];
  await new Promise((resolve, reject) => $rdf.parse(text, store, url, type, (error) => (error ? reject(error) : resolve())));
  process.stdout.write(JSON.stringify({
    statements: store.statements.length,
    // the document's own statements: rdflib.js names its default graph by the document's URL
    // (Turtle, JSON-LD) or keeps it as the default graph (N-Quads)
    defaultGraph: store.statements.filter((st) => st.why.equals(doc) || st.why.termType === "DefaultGraph").length,
  }) + "\n");
}

main().catch((error) => {
  process.stderr.write(String(error && error.stack || error) + "\n");
  process.exit(1);
});
