import { Worker } from "node:worker_threads";
import type { ReferenceDataOptions, SharedReferenceData } from "../engine/index.js";

/** Loads the reference tables in a short-lived worker thread and returns their shared form. */
export function loadSharedReference(options: ReferenceDataOptions): Promise<SharedReferenceData> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL("./reference-loader-worker.mjs", import.meta.url), { workerData: options });
    worker.once("message", (shared: SharedReferenceData) => {
      resolve(shared);
      void worker.terminate();
    });
    worker.once("error", reject);
    worker.once("exit", (code) => {
      if (code !== 0) reject(new Error(`reference data loader exited with code ${code}`));
    });
  });
}
