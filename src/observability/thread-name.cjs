// Names the calling thread for the operating system (`top -H`, `ps -L`,
// /proc/<pid>/task/<tid>/comm), so that the service's threads can be told
// apart: every Node.js thread is otherwise called "node". The benchmark reads
// these names to split the server's CPU by thread (bench/processes.ts).
// CommonJS, so that the plain JavaScript checkpointer thread can load it too.
"use strict";
const { writeFileSync } = require("node:fs");

/** Linux keeps 15 bytes of a thread's name. */
const MAX_NAME = 15;

/** Best effort: elsewhere than Linux, or without /proc, the thread keeps its name. */
function nameThread(name) {
  try {
    writeFileSync("/proc/thread-self/comm", name.slice(0, MAX_NAME));
  } catch {
    // Not Linux, or /proc not mounted: nothing to name it with.
  }
}

module.exports = { nameThread };
