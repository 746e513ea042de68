import { Worker } from "node:worker_threads";
import { ReferenceData, type ListError, type ReferenceDataOptions, type SharedReferenceData } from "../engine/index.js";

export interface LoadedReference {
  shared: SharedReferenceData;
  /** How the tables were obtained, for the start-up log. */
  source: "snapshot" | "built";
  /** When they were built but the snapshot for the next start could not be written. */
  snapshotError?: string;
  /**
   * The configured list files that could not be read as the tables were
   * loaded. The engine starts without them (each list stays empty, its signal
   * off, until the file can be read: the workers look again at most once a
   * second while evaluations come in), so the operator needs telling.
   */
  unreadableLists: UnreadableList[];
}

/** A configured list file that cannot be read, named by the setting that points at it. */
export interface UnreadableList {
  variable: "FRAUD_TOR_EXIT_LIST" | "FRAUD_DATACENTER_RANGES";
  path: string;
  error: string;
}

const LIST_VARIABLES = { torExits: "FRAUD_TOR_EXIT_LIST", datacenterRanges: "FRAUD_DATACENTER_RANGES" } as const;

function unreadable(errors: ListError[]): UnreadableList[] {
  return errors.map(({ list, path, error }) => ({ variable: LIST_VARIABLES[list], path, error }));
}

/**
 * The reference tables in their shared form: read from the snapshot when it
 * matches the sources, else built in a short-lived worker thread (which also
 * writes the snapshot), so that the parsing garbage leaves with the thread.
 */
export async function loadSharedReference(options: ReferenceDataOptions): Promise<LoadedReference> {
  const snapshot = ReferenceData.fromSnapshot(options);
  if (snapshot) return { shared: snapshot.toShared(), source: "snapshot", unreadableLists: unreadable(snapshot.listErrors()) };
  return new Promise((resolve, reject) => {
    // A small young generation: the parser's garbage is short-lived, and this bounds the start-up peak.
    const worker = new Worker(new URL("./reference-loader-worker.mjs", import.meta.url), {
      workerData: options,
      resourceLimits: { maxYoungGenerationSizeMb: 4 },
    });
    worker.once("message", (built: { shared: SharedReferenceData; snapshotError: string | undefined; listErrors: ListError[] }) => {
      resolve({
        shared: built.shared,
        source: "built",
        ...(built.snapshotError !== undefined && { snapshotError: built.snapshotError }),
        unreadableLists: unreadable(built.listErrors),
      });
      void worker.terminate();
    });
    worker.once("error", reject);
    worker.once("exit", (code) => {
      if (code !== 0) reject(new Error(`reference data loader exited with code ${code}`));
    });
  });
}
