#!/usr/bin/env node
// Boxcar's warm Node host for browser hooks (hook_executor/warm/node_hosts.py); not a hook.
//
//   node node_host.js --control=<fd> <preload specifier> ...
//
// Runs abx-plugins' browser hooks (the foreground ones and the listeners that run beside them)
// one after another in this one process, so each hook no longer pays Node's start and the
// loading of puppeteer-core (kept in require.cache between hooks). Every hook still runs as it
// would as a program of its own:
//   - process.argv, process.env (replaced whole), the cwd, require.main and process.exitCode
//     are the hook's; every module outside a node_modules directory (the hook, base/utils.js,
//     chrome_utils.js: they keep state such as a config cache) is loaded afresh for each hook
//     (base/utils.js's config cache is then handed what an earlier run computed in the same
//     environment: node_config_memo.js);
//   - what it writes to fd 1 and 2 (console, process.stdout/stderr, fs.writeSync(1, …) as
//     abx-plugins' emitArchiveResultRecord does) goes to that run's two FIFOs, and only while
//     the run lasts: a callback of an earlier hook that fires later writes nowhere
//     (AsyncLocalStorage tells whose callback it is);
//   - process.exit(code) ends the run (its 'exit' listeners are called, as at a real exit) and
//     stops the code that called it; an uncaught exception or unhandled rejection ends it with
//     1 and its stack on stderr, as Node would;
//   - a signal the executor sends it (SIGTERM: a listener's stop) reaches the 'SIGTERM' listeners
//     the hook added; a hook with none dies of it, as a process would, and so does its host.
// After a run that leaves anything behind (an open socket, a live timer, an uncaught error, a
// file it created exclusively: a lock naming its pid), the host says "retire" and exits: the
// next hook gets a fresh host.
//
// Protocol: one JSON object per line on stdin ({"argv": [node, script, ...args], "cwd",
// "env", "per_run_env": [names], "stdout": FIFO path, "stderr": FIFO path}); on the control fd one
// JSON line per event: {"ready": pid} once preloaded, {"started": n} when a run has begun, then
// {"exit": code, "retire": bool, "left": [...], "handed": configs handed over} (with "signal":
// number when a signal ended it). A line
// {"signal": "SIGTERM", "run": n} on stdin signals run n (nothing if it has ended). EOF on stdin
// ends the host.
"use strict";
const fs = require("fs");
const path = require("path");
const Module = require("module");
const net = require("net");
const os = require("os");
const url = require("url");
const { AsyncLocalStorage } = require("async_hooks");

const CONTROL = Number((process.argv.find((arg) => arg.startsWith("--control=")) || "--control=3").split("=")[1]);
const realWriteSync = fs.writeSync;
const realWrite = fs.write;
const realExit = process.exit.bind(process);
const realSetTimeout = globalThis.setTimeout;
const runs = new AsyncLocalStorage();
const WATCHED_EVENTS = ["exit", "beforeExit", "SIGTERM", "SIGINT", "SIGHUP", "warning", "message"];

class HookExit extends Error {}

let current = null; // the run in progress: {out, err, done, listeners, code}
let retiring = false;
let sequence = 0;
let baseline = null;

function control(message) {
  const data = Buffer.from(`${JSON.stringify(message)}\n`);
  let offset = 0;
  while (offset < data.length) offset += realWriteSync.call(fs, CONTROL, data, offset, data.length - offset);
}

function sinkFor(fd) {
  const run = runs.getStore();
  if (!run || run !== current || run.done) return null;
  return fd === 1 ? run.out : run.err;
}

function byteLength(data, encoding) {
  if (typeof data === "string") return Buffer.byteLength(data, typeof encoding === "string" ? encoding : "utf8");
  return data ? data.byteLength : 0;
}

function writeAll(fd, data, encoding) {
  const buffer = typeof data === "string" ? Buffer.from(data, typeof encoding === "string" ? encoding : "utf8") : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  let offset = 0;
  while (offset < buffer.length) {
    try {
      offset += realWriteSync.call(fs, fd, buffer, offset, buffer.length - offset);
    } catch (error) {
      if (error.code === "EAGAIN") continue;
      if (error.code === "EPIPE") return; // the executor stopped reading: the run is being killed
      throw error;
    }
  }
}

// fd 1 and 2, however a hook reaches them
fs.writeSync = function (fd, data, ...rest) {
  if (fd !== 1 && fd !== 2) return realWriteSync.call(fs, fd, data, ...rest);
  const sink = sinkFor(fd);
  if (typeof data === "string") {
    if (sink !== null) writeAll(sink, data, rest[1] ?? rest[0]);
    return byteLength(data, rest[1] ?? rest[0]);
  }
  const options = rest[0] !== null && typeof rest[0] === "object" ? rest[0] : {};
  const offset = typeof rest[0] === "number" ? rest[0] : (options.offset ?? 0);
  const length = typeof rest[1] === "number" ? rest[1] : (options.length ?? data.byteLength - offset);
  const view = Buffer.from(data.buffer, data.byteOffset + offset, length);
  if (sink !== null) writeAll(sink, view);
  return length;
};
for (const name of ["writeFileSync", "appendFileSync"]) {
  const real = fs[name];
  fs[name] = function (file, data, options) {
    if (file !== 1 && file !== 2) return real.call(fs, file, data, options);
    const encoding = typeof options === "string" ? options : options && options.encoding;
    fs.writeSync(file, typeof data === "string" ? Buffer.from(data, encoding || "utf8") : data);
  };
}
// A file a run creates exclusively (open with "wx": abx-plugins' acquireSessionLock writes
// process.pid into it, and a later taker removes it once that pid is dead) names the host's pid,
// which outlives the run. If that same file (device and inode) is still there when the run ends,
// the host retires, so that its holder is dead, as after the hook's own exit. (Only open/openSync
// are watched: abx-plugins 1.13 makes its locks with openSync; check that before hosting a hook
// that takes locks another way.)
function exclusive(flags) {
  if (typeof flags === "string") return flags.includes("x");
  return typeof flags === "number" && (flags & fs.constants.O_EXCL) !== 0;
}
function noteExclusive(run, file, fd) {
  try {
    const stat = fs.fstatSync(fd);
    const where = file instanceof URL ? url.fileURLToPath(file) : path.resolve(file.toString());
    run.exclusive.push({ path: where, dev: stat.dev, ino: stat.ino });
  } catch (error) {
    // closed already: nothing of it can be left
  }
}
// Code of a run that has exited changes no files: its process would be gone. (In a host,
// process.exit throws, so a catch around it still runs: redirects' writes a "failed" marker;
// later callbacks of the run may fire too.) Such code gets HookExit, which nothing reports.
// That, and noting the exclusive opens above, is one wrapper per function:
for (const name of [
  "writeFileSync", "appendFileSync", "renameSync", "copyFileSync", "mkdirSync", "rmSync", "rmdirSync",
  "unlinkSync", "openSync", "writeFile", "appendFile", "rename", "copyFile", "mkdir", "rm", "unlink",
  "open", "createWriteStream",
]) {
  const real = fs[name];
  fs[name] = function (...args) {
    const run = runs.getStore();
    if (run !== undefined && run.done) throw new HookExit(`fs.${name} after the run's exit`);
    const noting = (name === "openSync" || name === "open") && run !== undefined && run === current;
    if (!noting || !exclusive(args[1])) return real.apply(fs, args);
    if (name === "openSync") {
      const fd = real.apply(fs, args);
      noteExclusive(run, args[0], fd);
      return fd;
    }
    const callback = args.pop();
    if (typeof callback !== "function") return real.apply(fs, [...args, callback]);
    return real.call(fs, ...args, (error, fd) => {
      if (!error && !run.done) noteExclusive(run, args[0], fd);
      callback(error, fd);
    });
  };
}
function exclusiveLeft(run) {
  return run.exclusive
    .filter(({ path: where, dev, ino }) => {
      try {
        const stat = fs.statSync(where);
        return stat.dev === dev && stat.ino === ino;
      } catch (error) {
        return false; // removed (or replaced by another taker's: not this run's)
      }
    })
    .map(({ path: where }) => where);
}
fs.write = function (fd, data, ...rest) {
  if (fd !== 1 && fd !== 2) return realWrite.call(fs, fd, data, ...rest);
  const callback = rest.pop();
  let written = 0;
  try {
    written = fs.writeSync(fd, data, ...rest);
  } catch (error) {
    process.nextTick(callback, error);
    return;
  }
  process.nextTick(callback, null, written, data);
};
for (const [stream, fd] of [
  [process.stdout, 1],
  [process.stderr, 2],
]) {
  stream.write = function (chunk, encoding, callback) {
    const done = typeof encoding === "function" ? encoding : callback;
    const sink = sinkFor(fd);
    if (sink !== null) writeAll(sink, chunk, typeof encoding === "string" ? encoding : undefined);
    if (typeof done === "function") process.nextTick(done);
    return true;
  };
}

// timers and sockets a run makes, so that what it leaves behind at its exit can be stopped as the
// end of its process would have stopped it
function track(kind, thing) {
  const run = runs.getStore();
  if (run && run === current && !run.done) {
    const things = run[kind];
    things.add(thing);
    if (kind === "timers" && things.size > 1000) {
      // puppeteer sets a timer per DevTools call: forget the ones that have fired or were cleared
      for (const entry of things) if (entry[0]._destroyed) things.delete(entry);
    }
  }
  return thing;
}
for (const [make, clear] of [
  ["setTimeout", "clearTimeout"],
  ["setInterval", "clearInterval"],
  ["setImmediate", "clearImmediate"],
]) {
  const realMake = globalThis[make];
  const realClear = globalThis[clear];
  globalThis[make] = Object.assign(
    function (...args) {
      const timer = realMake.apply(this, args);
      track("timers", [timer, realClear]);
      return timer;
    },
    realMake
  );
}
const realConnect = net.Socket.prototype.connect;
net.Socket.prototype.connect = function (...args) {
  track("sockets", this);
  return realConnect.apply(this, args);
};

function stopLeftovers(run) {
  // A pending timer that keeps the loop alive would have died with the hook's process. An unref'd
  // one would not have kept it alive, and may belong to a module that outlives the run (Node's
  // fetch keeps one ticking timer for all its timeouts): it is left alone, and what its callback
  // writes goes nowhere.
  for (const [timer, clear] of run.timers) {
    if (timer._destroyed) continue;
    if (typeof timer.hasRef === "function" && !timer.hasRef()) continue;
    clear(timer);
  }
  run.timers.clear();
  for (const socket of run.sockets) {
    if (!socket.destroyed) socket.destroy();
  }
  run.sockets.clear();
}

process.exit = function (code) {
  const run = runs.getStore();
  if (run && run === current && !run.done) {
    finish(run, code === undefined || code === null ? process.exitCode ?? 0 : code);
  }
  throw new HookExit("process.exit");
};

function failCurrent(error) {
  if (error instanceof HookExit) return;
  // whose code failed: the run whose callback it was, else the one in progress
  const store = runs.getStore();
  const run = store !== undefined ? store : current;
  if (!run || run !== current || run.done) {
    // something of an earlier run failed after its exit: the next hook gets a fresh host
    retiring = true;
    if (current === null) realExit(0);
    return;
  }
  const text = error && error.stack ? error.stack : String(error);
  writeAll(run.err, `${text}\n\nNode.js ${process.version}\n`);
  run.leftovers = true;
  finish(run, 1);
}
process.on("uncaughtException", failCurrent);
process.on("unhandledRejection", failCurrent);

function listenerSnapshot() {
  const out = {};
  for (const name of WATCHED_EVENTS) out[name] = process.listeners(name);
  return out;
}

function resources() {
  const counts = {};
  for (const kind of process.getActiveResourcesInfo()) counts[kind] = (counts[kind] || 0) + 1;
  return counts;
}

function finish(run, code) {
  if (run.done) return;
  const exitCode = Number.isInteger(Number(code)) ? Number(code) & 0xff : 1;
  // 'exit' listeners the hook added run as they would at its real exit, still writing to its streams
  for (const listener of process.listeners("exit")) {
    if (run.listeners.exit.includes(listener)) continue;
    try {
      runs.run(run, () => listener(exitCode));
    } catch (error) {
      if (!(error instanceof HookExit)) writeAll(run.err, `${error && error.stack ? error.stack : error}\n`);
    }
  }
  run.done = true;
  for (const name of WATCHED_EVENTS) {
    for (const listener of process.listeners(name)) {
      if (!run.listeners[name].includes(listener)) process.removeListener(name, listener);
    }
  }
  for (const fd of [run.out, run.err]) {
    try {
      fs.closeSync(fd);
    } catch (error) {
      // already closed
    }
  }
  stopLeftovers(run);
  const locks = exclusiveLeft(run);
  // what the run left running shows once the sockets it left have closed (the close callbacks
  // come after the check phase of this turn of the event loop)
  realSetTimeout(() => {
    const now = resources();
    const left = Object.keys(now).filter((kind) => now[kind] > (baseline[kind] || 0));
    if (locks.length > 0) left.push(`created ${locks.join(", ")}`);
    const retire = retiring || run.leftovers || left.length > 0;
    current = null;
    control({ exit: exitCode, retire, left, handed: run.handed });
    if (retire) realExit(0);
  }, 0);
}

function signal(request) {
  const run = current;
  const number = os.constants.signals[request.signal]; // the executor forwards SIGTERM, SIGINT, SIGHUP
  if (!run || run.done || run.id !== request.run || number === undefined) return; // it has ended
  if (process.listenerCount(request.signal) > 0) {
    // only the run's own (finish removes them; the host adds none): as Node calls them, with the
    // name and number, once-listeners once, and none after one has called process.exit
    runs.run(run, () => {
      try {
        process.emit(request.signal, request.signal, number);
      } catch (error) {
        failCurrent(error);
      }
    });
    return;
  }
  // no handler: the default action, death (no 'exit' listeners run); the host ends with it
  run.done = true;
  process.removeAllListeners("exit");
  control({ exit: 128 + number, signal: number, retire: true, left: [], handed: run.handed });
  realExit(0);
}

// abx-plugins' config, remembered from run to run (node_config_memo.js): base/utils.js's
// loadConfig result is handed to the next run in the same environment
require("./node_config_memo.js").install({
  activeRun() {
    const run = runs.getStore();
    return run && run === current && !run.done ? run : null;
  },
  isLive: (run) => run === current && !run.done,
});

function freshModules() {
  for (const file of Object.keys(require.cache)) {
    if (!file.split(path.sep).includes("node_modules")) delete require.cache[file];
  }
  Module._pathCache = Object.create(null);
}

function start(request) {
  if (current !== null) throw new Error("a run is in progress");
  const [, script, ...args] = request.argv;
  const run = {
    out: fs.openSync(request.stdout, "w"),
    err: fs.openSync(request.stderr, "w"),
    done: false,
    leftovers: false,
    listeners: listenerSnapshot(),
    timers: new Set(),
    sockets: new Set(),
    exclusive: [],
    perRunEnv: new Set(Array.isArray(request.per_run_env) ? request.per_run_env : []),
    handed: 0,
    id: ++sequence,
  };
  current = run;
  for (const key of Object.keys(process.env)) delete process.env[key];
  Object.assign(process.env, request.env);
  Module._initPaths();
  freshModules();
  process.argv = [process.execPath, script, ...args];
  process.exitCode = undefined;
  process.chdir(request.cwd);
  control({ started: run.id });
  runs.run(run, () => {
    try {
      Module._load(path.resolve(script), null, true);
    } catch (error) {
      failCurrent(error);
    }
  });
}

function preload(specifiers) {
  const requireFrom = Module.createRequire(path.join(process.cwd(), "noop.js"));
  for (const specifier of specifiers) {
    try {
      requireFrom(specifier);
    } catch (error) {
      // not there: the hooks load it as they always do
    }
  }
  freshModules();
}

preload(process.argv.slice(2).filter((arg) => !arg.startsWith("--control=")));
let pending = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => {
  pending += chunk;
  let newline;
  while ((newline = pending.indexOf("\n")) >= 0) {
    const line = pending.slice(0, newline);
    pending = pending.slice(newline + 1);
    if (!line.trim()) continue;
    try {
      const request = JSON.parse(line);
      if (request.signal !== undefined) signal(request);
      else start(request);
    } catch (error) {
      if (current === null) {
        control({ error: String(error && error.message ? error.message : error) });
        realExit(1);
      }
    }
  }
});
process.stdin.on("end", () => realExit(0));
// taken the way each run's check is (inside a timer, which counts itself)
realSetTimeout(() => {
  baseline = resources();
  control({ ready: process.pid });
}, 0);
