import type { Clock } from "../clock.js";
import { appendEntry } from "./entry.js";
import type { AuditFields, AuditRecord, EntrySigner } from "./entry.js";

/**
 * Where entries are kept. The SQLite repository implements it with a table
 * shaped like {@link AuditRow} (docs/audit-log.md has the suggested DDL).
 */
export interface AuditStore {
  /**
   * Calls `build` with the current last entry and stores what it returns, as
   * one atomic step that excludes other writers (in SQLite: an IMMEDIATE
   * transaction around "read last row, insert"), so two processes can never
   * both chain to the same predecessor.
   */
  append(build: (last: AuditRecord | undefined) => AuditRecord): AuditRecord;
  /**
   * As {@link append} for several entries in one step, each built on the one
   * before: the last entry is read once, not once per entry.
   */
  appendAll(builds: ReadonlyArray<(last: AuditRecord | undefined) => AuditRecord>): AuditRecord[];
  /** Every entry in storage order (ascending seq), streamed. */
  entries(): Iterable<AuditRecord>;
  /**
   * Runs `work` as one transaction together with the appends it makes, so a
   * change and its entry are stored together or not at all.
   */
  atomically<T>(work: () => T): T;
}

/**
 * What the rest of the service depends on to record what it changes: call
 * `record` inside the transaction of the change (the append joins it: if either
 * fails, both roll back), so the change and its entry are stored together or not at all.
 * Code without a transaction of its own wraps the change in `atomically`.
 */
export interface AuditTrail {
  record(fields: AuditFields): AuditRecord;
  /** Entries for several changes, in order, as one append. */
  recordAll(fields: readonly AuditFields[]): AuditRecord[];
  atomically<T>(work: () => T): T;
}

/** Appends signed, chained entries to a store. */
export class AuditLog implements AuditTrail {
  constructor(
    private readonly store: AuditStore,
    private readonly signer: EntrySigner,
    private readonly clock: Clock,
  ) {}

  record(fields: AuditFields): AuditRecord {
    return this.store.append((last) => appendEntry(last, fields, this.signer, this.clock));
  }

  recordAll(fields: readonly AuditFields[]): AuditRecord[] {
    if (fields.length === 0) return [];
    return this.store.appendAll(fields.map((each) => (last: AuditRecord | undefined) => appendEntry(last, each, this.signer, this.clock)));
  }

  atomically<T>(work: () => T): T {
    return this.store.atomically(work);
  }
}

/** A store in an array, for tests and tools; `records` is exposed so tests can tamper with it. */
export class MemoryAuditStore implements AuditStore {
  readonly records: AuditRecord[] = [];

  append(build: (last: AuditRecord | undefined) => AuditRecord): AuditRecord {
    const record = build(this.records.at(-1));
    this.records.push(record);
    return record;
  }

  appendAll(builds: ReadonlyArray<(last: AuditRecord | undefined) => AuditRecord>): AuditRecord[] {
    return builds.map((build) => this.append(build));
  }

  entries(): Iterable<AuditRecord> {
    return this.records;
  }

  atomically<T>(work: () => T): T {
    return work();
  }
}
