// The better-sqlite3 build this Node.js runs. better-sqlite3 13 (node-addon-api)
// needs Node 22 or later; 12 runs on Node 20 but, on Node 24, aborts the process
// ("Assertion failed: (env) != nullptr" in RemoveEnvironmentCleanupHook) when a
// statement or connection is garbage-collected. So package.json pins 12 as the
// dependency and 13 under the alias better-sqlite3-node22 (an optional
// dependency: npm installs it on Node 20 too, where it is never loaded), and
// every connection of the service is opened through this module. The API is
// the same. CommonJS, so that plain worker scripts can require() it as well.
"use strict";

const NODE_MAJOR = Number(process.versions.node.split(".")[0]);

function load() {
  if (NODE_MAJOR >= 22) {
    try {
      return require("better-sqlite3-node22");
    } catch (error) {
      // Optional: an install that left it out (--omit=optional) falls back to 12.
      if (error.code !== "MODULE_NOT_FOUND") throw error;
    }
  }
  return require("better-sqlite3");
}

module.exports = load();
