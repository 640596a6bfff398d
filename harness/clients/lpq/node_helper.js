// Long-lived helper: Node PostgreSQL drivers behind one JSON-lines protocol (docs/clients.md,
// "The JSON-lines helper protocol"). One request per line on stdin, one reply per line on stdout;
// requests run concurrently, replies carry the request's id. Drivers come from
// tools/drivers/node/node_modules (NODE_PATH), pinned by its package-lock.json.
'use strict';
const readline = require('readline');

const conns = new Map();
let nextConn = 1;

function versionOf(name) {
  for (const dir of (process.env.NODE_PATH || '').split(require('path').delimiter)) {
    try { return JSON.parse(require('fs').readFileSync(require('path').join(dir, name, 'package.json'))).version; }
    catch (e) { /* next */ }
  }
  return null;
}

function text(v) {
  if (v === null || v === undefined) return null;
  if (v instanceof Date) return v.toISOString();
  return String(v);
}

function failure(err) {
  const code = (err && (err.code || (err.original && err.original.code))) || null;
  const sqlstate = typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : null;
  return { ok: false, error: `${(err && err.name) || 'Error'}: ${(err && err.message) || String(err)}`.split('\n')[0],
           sqlstate, code: typeof code === 'string' ? code : null };
}

const drivers = {
  // node-postgres: a single host (it has no host list).
  async pg(o) {
    const { Client } = require('pg');
    const client = new Client({ host: o.host, port: o.port, database: o.database, user: o.user, password: o.password,
                                connectionTimeoutMillis: o.connectionTimeoutMillis });
    client.on('error', () => {});
    await client.connect();
    return {
      host: `${client.host}:${client.port}`,
      async execute(sql) { const r = await client.query({ text: sql, rowMode: 'array' });
                           return (r.rows || []).map(row => row.map(text)); },
      async close() { await client.end(); },
    };
  },
  // postgres.js: host/port arrays, target_session_attrs, connect_timeout (s). It connects lazily, on
  // the first query (a reserve() alone does not connect in 3.4): the open is that first query, then
  // the one connection (max: 1) is reserved for the session.
  async postgres(o) {
    const postgres = require('postgres');
    const sql = postgres({ ...o, max: 1, onnotice: () => {}, fetch_types: false, prepare: false });
    let reserved;
    try { await sql.unsafe('SELECT 1'); reserved = await sql.reserve(); }
    catch (e) { sql.end({ timeout: 0 }).catch(() => {}); throw e; }
    return {
      host: null,
      async execute(q) { const r = await reserved.unsafe(q).values(); return (r || []).map(row => row.map(text)); },
      async close() { reserved.release(); await sql.end({ timeout: 1 }); },
    };
  },
};

async function handle(req) {
  switch (req.op) {
    case 'hello':
      return { ok: true, pid: process.pid, node: process.version,
               versions: { pg: versionOf('pg'), postgres: versionOf('postgres') } };
    case 'open': {
      const make = drivers[req.driver];
      if (!make) return { ok: false, error: `unknown driver ${req.driver}` };
      const c = await make(req.options || {});
      const id = nextConn++;
      conns.set(id, c);
      return { ok: true, conn: id, host: c.host };
    }
    case 'execute': {
      const c = conns.get(req.conn);
      if (!c) return { ok: false, error: `no connection ${req.conn}` };
      return { ok: true, rows: await c.execute(req.sql) };
    }
    case 'close': {
      const c = conns.get(req.conn);
      conns.delete(req.conn);
      if (c) await c.close();
      return { ok: true };
    }
    case 'quit':
      setImmediate(() => process.exit(0));
      return { ok: true };
    default:
      return { ok: false, error: `unknown op ${req.op}` };
  }
}

const pending = new Set();
function send(id, reply) {
  if (!pending.delete(id)) return;  // answered already (e.g. failed by a driver crash)
  process.stdout.write(JSON.stringify({ id, ...reply }) + '\n');
}

const rl = readline.createInterface({ input: process.stdin });
rl.on('line', line => {
  let req;
  try { req = JSON.parse(line); } catch (e) { process.stdout.write(JSON.stringify({ id: null, ...failure(e) }) + '\n'); return; }
  pending.add(req.id);
  Promise.resolve().then(() => handle(req)).catch(failure).then(reply => send(req.id, reply));
});
rl.on('close', () => process.exit(0));
process.on('unhandledRejection', () => {});
// A driver that throws from one of its own callbacks (postgres.js 3.4.9 after a switchover: "Cannot
// read properties of null (reading 'write')") would end the helper: instead every request still
// waiting gets that error - the application's view of a driver crash - and the helper goes on.
process.on('uncaughtException', err => {
  process.stderr.write(`driver crash: ${err && err.stack || err}\n`);
  for (const id of [...pending]) send(id, { ok: false, error: `DriverCrash: ${(err && err.message) || err}`, sqlstate: null });
});
