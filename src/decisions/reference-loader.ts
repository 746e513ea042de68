import { Worker } from "node:worker_threads";
import { ReferenceData, type ReferenceDataOptions, type SharedReferenceData } from "../engine/index.js";
import { ReloadableFile } from "../engine/reloadable-file.js";

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
 * The configured list files that cannot be read now, read as the engine
 * reads them. The engine starts without them (each list stays empty, its
 * signal off, until the file can be read: the workers look again at most once
 * a second while evaluations come in), so the operator needs telling.
 */
export function unreadableLists(options: ReferenceDataOptions): UnreadableList[] {
  const lists = [
    { variable: "FRAUD_TOR_EXIT_LIST", path: options.torExitListPath },
    { variable: "FRAUD_DATACENTER_RANGES", path: options.datacenterRangesPath },
  ] as const;
  const problems: UnreadableList[] = [];
  for (const { variable, path } of lists) {
    if (path === undefined) continue;
    const error = new ReloadableFile(path, () => true, false).lastError;
    if (error !== null) problems.push({ variable, path, error });
  }
  return problems;
}
