import { afterAll } from "vitest";
import { stopServerProcesses } from "./helpers/process.js";
import { removeTempDirs } from "./helpers/temp-dirs.js";

// After each test file, whatever its tests left behind: a server process a failed assertion never reached
// the kill of, and the temp dirs (databases, keys, logs) its tests made. Hooks after a file run in reverse
// order of registration, so this runs after the file's own afterAll hooks have closed what they opened.
afterAll(async () => {
  await stopServerProcesses();
  removeTempDirs();
});
