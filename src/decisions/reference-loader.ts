import { accessSync, constants, statSync } from "node:fs";
import { Worker } from "node:worker_threads";
import { ReferenceData, type ReferenceDataOptions, type SharedReferenceData } from "../engine/index.js";

export interface LoadedReference {
  shared: SharedReferenceData;
  /** How the tables were obtained, for the start-up log. */
  source: "snapshot" | "built";
  /** When they were built but the snapshot for the next start could not be written. */
  snapshotError?: string;
}

/**
 * The reference tables in their shared form: read from the snapshot when it
 * matches the sources, else built in a short-lived worker thread (which also
 * writes the snapshot), so that the parsing garbage leaves with the thread.
 */
export async function loadSharedReference(options: ReferenceDataOptions): Promise<LoadedReference> {
  const snapshot = ReferenceData.fromSnapshot(options);
  if (snapshot) return { shared: snapshot.toShared(), source: "snapshot" };
  return new Promise((resolve, reject) => {
    // A small young generation: the parser's garbage is short-lived, and this bounds the start-up peak.
    const worker = new Worker(new URL("./reference-loader-worker.mjs", import.meta.url), {
      workerData: options,
      resourceLimits: { maxYoungGenerationSizeMb: 4 },
    });
    worker.once("message", (built: { shared: SharedReferenceData; snapshotError: string | undefined }) => {
      resolve({ shared: built.shared, source: "built", ...(built.snapshotError !== undefined && { snapshotError: built.snapshotError }) });
      void worker.terminate();
    });
    worker.once("error", reject);
    worker.once("exit", (code) => {
      if (code !== 0) reject(new Error(`reference data loader exited with code ${code}`));
    });
  });
}

/** A configured list file that cannot be read. */
export interface UnreadableList {
  variable: "FRAUD_TOR_EXIT_LIST" | "FRAUD_DATACENTER_RANGES";
  path: string;
  error: string;
}

/**
 * The configured list files that cannot be read now. The engine starts
 * without them (each list stays empty, its signal off, until the file can be
 * read: the workers look again every second), so the operator needs telling.
 */
export function unreadableLists(options: ReferenceDataOptions): UnreadableList[] {
  const lists = [
    { variable: "FRAUD_TOR_EXIT_LIST", path: options.torExitListPath },
    { variable: "FRAUD_DATACENTER_RANGES", path: options.datacenterRangesPath },
  ] as const;
  const problems: UnreadableList[] = [];
  for (const { variable, path } of lists) {
    if (path === undefined) continue;
    try {
      if (!statSync(path).isFile()) throw new Error(`${path} is not a file`);
      accessSync(path, constants.R_OK);
    } catch (error) {
      problems.push({ variable, path, error: error instanceof Error ? error.message : String(error) });
    }
  }
  return problems;
}
