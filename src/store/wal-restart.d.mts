/** What a checkpoint reports, in WAL frames (SQLite's wal_checkpoint). */
export interface CheckpointPass {
  log: number;
  checkpointed: number;
}

/** The checkpoints startOver runs: the checkpointer's connection, or a script in tests. */
export interface WalCheckpoints {
  passive(): CheckpointPass;
  restart(): CheckpointPass & { busy: number };
  pause(ms: number): void;
}

export declare const MAX_PASSES: number;
export declare const MAX_RESTART_ATTEMPTS: number;
export declare const BUSY_PAUSE_MS: number;

/** Starts the WAL over past its limit (see wal-restart.mjs); returns the frames it holds afterwards. */
export declare function startOver(wal: WalCheckpoints, first: CheckpointPass, forceRestartAboveFrames: number): number;
