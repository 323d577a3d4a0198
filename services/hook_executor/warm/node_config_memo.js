// abx-plugins' config, remembered from run to run, for Boxcar's warm Node host (node_host.js, which
// installs it once at its start); not a hook.
//
// base/utils.js's loadConfig works a plugin's
// config out of its schema (config.json) and the environment, and keeps it in a module-level Map
// (configCache) for the life of the process. As every module outside node_modules is loaded afresh
// for each run, every run worked it out again: chrome_utils.js's load alone spends ~20 ms of CPU
// on it (array and object properties get a new value on each pass of loadConfig's fixed-point
// loop, so it makes one pass per property), and nearly every browser hook loads chrome_utils.js.
// So the host remembers what loadConfig computed, under the utils.js and config file it came from,
// the two schema files as they were (inode, size, mtime, ctime), and the whole environment but the
// keys the executor sets differently for each task or run (PER_RUN_ENV); it hands a copy to the next
// run's fresh Map on that run's first lookup of that file: the value loadConfig would compute again.
//   - Of the per-run keys, a schema may read one only as a string property of the same name that
//     nothing else reads, whose value is taken as it is (not empty, no surrounding blanks, no
//     "{NAME}" for loadConfig to fill in) and appears in no other setting (base/config.json's
//     SNAP_DIR, TMP_DIR, EXTRA_CONTEXT): the copy gets the run's own value there. Any other use of
//     one, or a value not opaque so, and the config is computed for every run, as before. (A key
//     missing from PER_RUN_ENV only costs reuse; one loadConfig reads otherwise is caught here.)
//   - The one thing loadConfig does only when it computes, maybeSkipUnsupportedSnapshotUrl, acts
//     only for a snapshot hook whose --url is not http(s) or file: such a run is handed nothing.
// To reach the Map, the host appends one statement to base/utils.js's source as it compiles it (it
// does nothing if the file no longer has that Map); hooks that run as programs have no host and see
// the file unchanged. Each run's exit message says how many configs it was handed ("handed").
//
// A run is node_host.js's run object: this module reads its perRunEnv (a Set of PER_RUN_ENV's
// names, from the request) and counts the configs it hands over in its "handed".
"use strict";
const fs = require("fs");
const path = require("path");
const Module = require("module");

const CONFIG_MODULE = path.join("plugins", "base", "utils.js");
const CONFIG_CACHE = "const configCache = new Map();";
const CONFIG_MEMO_MAX = 64; // a crawl needs about one per plugin and environment (~20)
const TEMPLATE = /\{[A-Za-z_][A-Za-z0-9_]*\}/; // what loadConfig's hydrateConfigValue fills in
const configMemo = new Map(); // configKey -> {entry: a structured clone, perRun: [keys], files}
const ADOPT = "boxcar.node_host.adoptConfigCache";
const WRAPPED = Symbol.for("boxcar.node_host.configMemoCompile"); // marks install()'s compiler

function configKey(run, module, file) {
  const names = Object.keys(process.env).filter((name) => !run.perRunEnv.has(name)).sort();
  return `${module}\0${file}\0${JSON.stringify(names.map((name) => [name, process.env[name]]))}`;
}

// the schema files as loadConfig reads them (its own cache checks only their mtimes, which a
// process never outlives by much; a host may)
function schemaFiles(module, file) {
  const out = [];
  for (const where of new Set([path.join(path.dirname(module), "config.json"), file])) {
    try {
      const stat = fs.statSync(where);
      out.push([where, stat.ino, stat.size, stat.mtimeMs, stat.ctimeMs]);
    } catch (error) {
      return null;
    }
  }
  return JSON.stringify(out);
}

function opaque(value) {
  return typeof value === "string" && value !== "" && value === value.trim() && !TEMPLATE.test(value);
}

// the per-run keys a schema reads, each by a string property of its own name alone; null if any
// is read otherwise (an alias, a fallback, another type)
function perRunReads(run, properties) {
  const reads = [];
  for (const [name, prop] of Object.entries(properties || {})) {
    const aliases = prop && Array.isArray(prop["x-aliases"]) ? prop["x-aliases"] : [];
    const fallback = prop && prop["x-fallback"] ? [prop["x-fallback"]] : [];
    for (const key of [name, ...aliases, ...fallback]) {
      if (!run.perRunEnv.has(key)) continue;
      if (key !== name || prop.type !== "string" || aliases.includes(key) || fallback.includes(key)) return null;
      reads.push(key);
    }
  }
  return reads;
}

function containsElsewhere(config, except, text) {
  const found = (value) =>
    typeof value === "string"
      ? value.includes(text)
      : value !== null && typeof value === "object" && Object.values(value).some(found);
  return Object.entries(config).some(([name, value]) => name !== except && found(value));
}

function remember(run, module, file, entry) {
  if (!entry || typeof entry !== "object" || !entry.config || typeof entry.config !== "object") return;
  const perRun = perRunReads(run, entry.properties);
  if (perRun === null) return;
  for (const key of perRun) {
    const value = process.env[key];
    if (!opaque(value) || entry.config[key] !== value || containsElsewhere(entry.config, key, value)) return;
  }
  const files = schemaFiles(module, file);
  if (files === null) return;
  let copy;
  try {
    copy = structuredClone(entry);
  } catch (error) {
    return; // not cloneable: computed again next time
  }
  for (const key of perRun) copy.config[key] = "";
  const memoKey = configKey(run, module, file);
  configMemo.delete(memoKey);
  configMemo.set(memoKey, { entry: copy, perRun, files });
  if (configMemo.size > CONFIG_MEMO_MAX) configMemo.delete(configMemo.keys().next().value);
}

function recall(run, module, file) {
  const memoKey = configKey(run, module, file);
  const kept = configMemo.get(memoKey);
  if (kept === undefined) return undefined;
  if (kept.files !== schemaFiles(module, file)) {
    configMemo.delete(memoKey);
    return undefined;
  }
  if (!kept.perRun.every((key) => opaque(process.env[key]))) return undefined;
  configMemo.delete(memoKey); // most recently used last: the first to go is the least used
  configMemo.set(memoKey, kept);
  const entry = structuredClone(kept.entry);
  for (const key of kept.perRun) entry.config[key] = process.env[key];
  run.handed += 1;
  return entry;
}

// maybeSkipUnsupportedSnapshotUrl's condition, as the plugin reads the script and --url
function refusedUrl(argvUrl) {
  const script = path.basename(process.argv[1] || process.argv[0] || "");
  const url = argvUrl();
  return script.startsWith("on_Snapshot__") && url !== "" && !/^(https?|file):\/\//.test(url);
}

// Installs the memo in this process: base/utils.js, as it is compiled from now on, hands its
// configCache to adopt() while activeRun() returns a run (null: none is in progress, nothing is
// kept or handed); isLive(run) says whether that run is still the one in progress and not exited
// (a late callback of an ended run neither keeps nor gets a config). Installing again replaces
// activeRun and isLive (and, from a fresh copy of this module, the memo, which starts empty) but
// wraps the compiler only once, so base/utils.js still gets one statement and hands its
// configCache over once (as long as nothing else has wrapped the compiler since).
function install({ activeRun, isLive }) {
  if (!Module.prototype._compile[WRAPPED]) {
    const realCompile = Module.prototype._compile;
    const compile = function (content, filename, ...rest) {
      if (
        typeof content === "string" &&
        filename.endsWith(path.sep + CONFIG_MODULE) &&
        content.includes(CONFIG_CACHE)
      ) {
        content =
          `${content}\n;if (typeof configCache !== "undefined" && typeof argvUrl === "function") ` +
          `globalThis[Symbol.for(${JSON.stringify(ADOPT)})](configCache, argvUrl, __filename);\n`;
      }
      return realCompile.call(this, content, filename, ...rest);
    };
    compile[WRAPPED] = true;
    Module.prototype._compile = compile;
  }
  globalThis[Symbol.for(ADOPT)] = (cache, argvUrl, module) => {
    const run = activeRun();
    if (run === null || !(cache instanceof Map)) return;
    adopt(cache, argvUrl, module, run, () => isLive(run));
  };
}

// gives base/utils.js's fresh configCache (of this run) what earlier runs computed, and keeps what
// this run computes
function adopt(cache, argvUrl, module, run, live) {
  cache.set = function (file, entry) {
    if (live()) remember(run, module, file, entry);
    return Map.prototype.set.call(this, file, entry);
  };
  cache.get = function (file) {
    const found = Map.prototype.get.call(this, file);
    if (found !== undefined || !live() || refusedUrl(argvUrl)) return found;
    const entry = recall(run, module, file);
    if (entry !== undefined) Map.prototype.set.call(this, file, entry);
    return entry;
  };
}

module.exports = { install };
