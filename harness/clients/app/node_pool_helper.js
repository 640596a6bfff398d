// Long-lived helper: node-postgres's Pool behind the JSON-lines protocol (docs/clients.md, "The
// JSON-lines helper protocol"), for the app profile. Requests run concurrently; replies carry the
// request's id. node-postgres has no host list: the pool is given one host (the pair's first node,
// as an application would give its database's address). The pg package comes from
// tools/drivers/node/node_modules (NODE_PATH).
'use strict';
const readline = require('readline');

let pool = null;

function versionOf(name) {
  for (const dir of (process.env.NODE_PATH || '').split(require('path').delimiter)) {
    try { return JSON.parse(require('fs').readFileSync(require('path').join(dir, name, 'package.json'))).version; }
    catch (e) { /* next */ }
  }
  return null;
}

function failure(err, conn) {
  const code = (err && err.code) || null;
  const sqlstate = typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : null;
  return { ok: false, conn: conn || null, sqlstate,
           error: `${(err && err.name) || 'Error'}: ${(err && err.message) || String(err)}`.split('\n')[0] };
}

async function request(req) {
  const client = await pool.connect();
  const s = client.connection && client.connection.stream;
  const conn = s && s.localPort ? `${s.localAddress}:${s.localPort}` : null;
  try {
    await client.query('BEGIN');
    if (req.f === 'write') await client.query(req.write_sql, [req.key, req.process]);
    else await client.query(req.read_sql, [req.key]);
    await client.query('COMMIT');
    client.release();
    return { ok: true, conn };
  } catch (e) {
    client.release(e);  // a client that failed is destroyed, not returned to the pool
    return failure(e, conn);
  }
}

async function handle(req) {
  switch (req.op) {
    case 'hello':
      return { ok: true, pid: process.pid, node: process.version, versions: { pg: versionOf('pg') } };
    case 'pool_open': {
      const { Pool } = require('pg');
      pool = new Pool(req.options);
      pool.on('error', () => {});  // an idle client's connection died: the pool drops it
      return { ok: true };
    }
    case 'request':
      try { return await request(req); } catch (e) { return failure(e); }
    case 'pool_close':
      if (pool) await pool.end();
      return { ok: true };
    case 'quit':
      setImmediate(() => process.exit(0));
      return { ok: true };
    default:
      return { ok: false, error: `unknown op ${req.op}` };
  }
}

const rl = readline.createInterface({ input: process.stdin });
rl.on('line', line => {
  let req;
  try { req = JSON.parse(line); } catch (e) { process.stdout.write(JSON.stringify({ id: null, ...failure(e) }) + '\n'); return; }
  Promise.resolve().then(() => handle(req)).catch(e => failure(e))
    .then(reply => process.stdout.write(JSON.stringify({ id: req.id, ...reply }) + '\n'));
});
rl.on('close', () => process.exit(0));
process.on('unhandledRejection', () => {});
process.on('uncaughtException', err => process.stderr.write(`driver crash: ${err && err.stack || err}\n`));
