// node-postgres against `tablesql serve`: a parameterised query, a cursor,
// and an INSERT ... RETURNING into a table it creates.
// Run as `node node_client.js PORT USER DATABASE` with NODE_PATH naming the
// node_modules that scripts/node-clients installed; prints one JSON document
// for tests/it/clients.rs.
const { Client } = require("pg");
const Cursor = require("pg-cursor");
const fs = require("fs");
const path = require("path");

// `pg` exports no package.json: read it beside the module's entry point.
function versionOf(name) {
  let dir = path.dirname(require.resolve(name));
  while (!fs.existsSync(path.join(dir, "package.json"))) dir = path.dirname(dir);
  return JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")).version;
}

async function main() {
  const [port, user, database] = process.argv.slice(2);
  const client = new Client({ host: "127.0.0.1", port: Number(port), user, database });
  await client.connect();
  const out = {
    pg: versionOf("pg"),
    pg_cursor: versionOf("pg-cursor"),
  };
  const res = await client.query(
    "SELECT name, age FROM registrations WHERE bib = $1 ORDER BY event, distance",
    [7],
  );
  out.parameterised = res.rows;
  out.fields = res.fields.map((f) => [f.name, f.dataTypeID]);
  const cursor = client.query(
    new Cursor("SELECT bib FROM registrations WHERE age >= $1 ORDER BY event, distance, bib", [30]),
  );
  const read = (n) =>
    new Promise((resolve, reject) => cursor.read(n, (err, rows) => (err ? reject(err) : resolve(rows))));
  const first = await read(3);
  const second = await read(3);
  await new Promise((resolve) => cursor.close(resolve));
  out.cursor = first.concat(second).map((r) => r.bib);
  out.count = (await client.query("SELECT count(*) AS n FROM registrations")).rows[0].n;
  // A table of its own, and the new keys an INSERT returns.
  await client.query("CREATE TABLE todos (id SERIAL PRIMARY KEY, title TEXT NOT NULL, done BOOLEAN)");
  const inserted = await client.query(
    "INSERT INTO todos (title, done) VALUES ($1, $2), ($3, $4) RETURNING id, title",
    ["write", false, "test", true],
  );
  out.returning = { command: inserted.command, rowCount: inserted.rowCount, rows: inserted.rows };
  const updated = await client.query("UPDATE todos SET done = true WHERE id = $1 RETURNING *", [1]);
  out.updated = updated.rows;
  await client.end();
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
