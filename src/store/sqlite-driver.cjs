// The better-sqlite3 build this Node.js runs. better-sqlite3 13 (node-addon-api)
// needs Node 22 or later; 12 runs on Node 20 but, on Node 24, aborts the process
// ("Assertion failed: (env) != nullptr" in RemoveEnvironmentCleanupHook) when a
// statement or connection is garbage-collected. So package.json pins 12 as the
// dependency and 13 under the alias better-sqlite3-node22, an optional
// dependency that npm installs only where the running Node.js satisfies its
// engines (not on Node 20), and every connection of the service is opened
// through this module. The API is the same. CommonJS, so that plain worker
// scripts can require() it as well.
"use strict";

const NODE_MAJOR = Number(process.versions.node.split(".")[0]);
const BUILD_FOR_NODE_22 = "better-sqlite3-node22";

function installed(name) {
  try {
    require.resolve(name);
    return true;
  } catch {
    return false;
  }
}

function load() {
  if (NODE_MAJOR < 22) return require("better-sqlite3");
  if (installed(BUILD_FOR_NODE_22)) return require(BUILD_FOR_NODE_22);
  // Left out (npm ci --omit=optional, or its download failed and npm went on without it). 12 works on
  // Node 22 and 23; on 24 it would take the whole process down at some garbage collection, later and
  // with a native stack trace, so refuse now with the fix.
  if (NODE_MAJOR >= 24) {
    throw new Error(
      `${BUILD_FOR_NODE_22} (better-sqlite3 13) is not installed, and better-sqlite3 12 aborts the process on Node ${NODE_MAJOR}: run npm ci without --omit=optional`,
    );
  }
  process.emitWarning(`${BUILD_FOR_NODE_22} is not installed: using better-sqlite3 12 on Node ${NODE_MAJOR}`);
  return require("better-sqlite3");
}

module.exports = load();
