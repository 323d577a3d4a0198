#!/usr/bin/env node
// Boxcar's helper for the bundled puppeteer-core (hook_executor/nodebundle.py); not a hook.
//
//   node puppeteer_bundle.js resolve <package>[,<package> ...] <entry> [<entry> ...]
//     Finds puppeteer-core the way abx-plugins' resolvePuppeteerModule (chrome/chrome_utils.js)
//     does — the first of the packages (nodebundle.py's PACKAGES: "puppeteer-core", else
//     "puppeteer") on NODE_PATH — and prints one JSON object:
//     {"root": package dir (real path), "version": ..., "files": {entry: absolute file}} for each
//     entry ("." or "internal/…"), resolved from that package as the hooks' require would;
//     or null when neither package is on NODE_PATH.
//
//   node puppeteer_bundle.js check <shadow node_modules> <real package root> <entry> [...]
//     Loads every entry through the shadow package exactly as the hooks reach it, and fails
//     (exit 1, reason on stderr) unless each loads, the main entry can connect() and launch(), and
//     no file of the real package was loaded (the bundle holds all of it).
"use strict";
const path = require("path");
const Module = require("module");

function packageRequireFor(searchPaths, packages) {
  for (const moduleName of packages) {
    let entry;
    try {
      entry = require.resolve(moduleName, { paths: searchPaths });
    } catch (e) {
      continue;
    }
    return Module.createRequire(entry);
  }
  return null;
}

function specifier(entry) {
  return entry === "." ? "puppeteer-core" : `puppeteer-core/${entry}`;
}

function resolveMain(packages, entries) {
  const searchPaths = (process.env.NODE_PATH || "").split(path.delimiter).filter(Boolean);
  const packageRequire = packageRequireFor(searchPaths, packages);
  if (!packageRequire) {
    process.stdout.write("null\n");
    return;
  }
  const files = {};
  for (const entry of entries) files[entry] = packageRequire.resolve(specifier(entry));
  const manifest = packageRequire.resolve("puppeteer-core/package.json");
  const root = require("fs").realpathSync(path.dirname(manifest));
  const version = require(manifest).version;
  process.stdout.write(JSON.stringify({ root, version, files }) + "\n");
}

function checkMain(shadow, realRoot, entries) {
  const packageRequire = packageRequireFor([shadow], ["puppeteer-core"]); // the shadow's one package
  if (!packageRequire) throw new Error(`no puppeteer-core in ${shadow}`);
  const loaded = {};
  for (const entry of entries) loaded[entry] = packageRequire(specifier(entry));
  const main = loaded["."];
  if (main && (typeof main.connect !== "function" || typeof main.launch !== "function")) {
    throw new Error("the bundled main entry has no connect()/launch()");
  }
  const real = realRoot + path.sep;
  const leaked = Object.keys(require.cache).filter((file) => file.startsWith(real));
  if (leaked.length) throw new Error(`files of the real package were loaded: ${leaked.slice(0, 3).join(", ")}`);
  process.stdout.write("ok\n");
}

const [mode, ...rest] = process.argv.slice(2);
if (!((mode === "resolve" && rest.length >= 2) || (mode === "check" && rest.length >= 3))) {
  const name = path.basename(__filename);
  process.stderr.write(
    `usage: node ${name} resolve <package>[,<package> ...] <entry> [<entry> ...]\n` +
      `       node ${name} check <shadow node_modules> <real package root> <entry> [<entry> ...]\n`,
  );
  process.exit(2);
}
try {
  if (mode === "resolve") resolveMain(rest[0].split(",").filter(Boolean), rest.slice(1));
  else checkMain(rest[0], rest[1], rest.slice(2));
} catch (error) {
  process.stderr.write(`${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
}
