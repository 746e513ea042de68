// Builds the engine's reference tables in a throwaway thread and writes their
// snapshot for the next start: parsing the geolocation CSVs allocates far more
// than the tables keep, and that garbage leaves with the thread instead of
// staying in the server's heap. The tables live in SharedArrayBuffers, so
// posting them back copies nothing.
import { createRequire } from "node:module";
import { parentPort, workerData } from "node:worker_threads";
import { register } from "tsx/cjs/api";

register();
const require = createRequire(import.meta.url);
const { ReferenceData } = require("../engine/reference-data.ts");

const { data, snapshotError } = ReferenceData.build(workerData);
parentPort?.postMessage({ shared: data.toShared(), snapshotError, listErrors: data.listErrors() });
