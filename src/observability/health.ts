import type { Db } from "../store/database.js";

export interface CheckResult {
  name: string;
  ok: boolean;
  detail: string;
}

/** A source of pending background work (outbox, deliveries); later issues register theirs. */
export type BacklogGauge = () => number;

/** Why the store's writes are failing (a full disk, a read-only file), or undefined while they succeed. */
export type WriteCheck = () => string | undefined;

/** Above this many pending background tasks the Data Sync component reports degraded. */
export const BACKLOG_DEGRADED_AT = 10_000;

/**
 * Readiness checks shared by /api/health, the gRPC health service and the
 * status report, so the three can never disagree.
 */
export class HealthMonitor {
  private readonly probe;
  private readonly backlogs: BacklogGauge[] = [];
  private readonly writeChecks: WriteCheck[] = [];
  private draining = false;

  constructor(db: Db) {
    this.probe = db.prepare("SELECT 1 AS ok");
  }

  addBacklog(gauge: BacklogGauge): void {
    this.backlogs.push(gauge);
  }

  /**
   * A store that answers reads can still refuse every write (a full disk):
   * the database check fails while a write check names a failure.
   */
  addWriteCheck(check: WriteCheck): void {
    this.writeChecks.push(check);
  }

  private readonly drainingController = new AbortController();

  /** Aborted when shutdown starts: what waits on the status (a health Watch) stops waiting. */
  get drainingSignal(): AbortSignal {
    return this.drainingController.signal;
  }

  /** Called when shutdown starts: readiness turns false so balancers stop sending traffic. */
  markDraining(): void {
    this.draining = true;
    this.drainingController.abort();
  }

  /** Pending background tasks; undefined when they cannot be counted (the store is failing). */
  private backlog(): number | undefined {
    try {
      return this.backlogs.reduce((sum, gauge) => sum + gauge(), 0);
    } catch {
      return undefined;
    }
  }

  /** The checks, whether all pass, and the backlog they were made from (one count of it). */
  report(): { checks: CheckResult[]; ready: boolean; backlog: number | undefined } {
    let database: CheckResult;
    try {
      this.probe.get();
      const writeFailure = this.writeChecks.map((check) => check()).find((failure) => failure !== undefined);
      database = writeFailure === undefined ? { name: "database", ok: true, detail: "ok" } : { name: "database", ok: false, detail: `writes failing: ${writeFailure}` };
    } catch (error) {
      database = { name: "database", ok: false, detail: error instanceof Error ? error.message : "failed" };
    }
    const pending = this.backlog();
    const accepting = { name: "accepting", ok: !this.draining, detail: this.draining ? "shutting down" : "ok" };
    const checks = [
      database,
      {
        name: "background",
        ok: pending !== undefined && pending < BACKLOG_DEGRADED_AT,
        detail: pending === undefined ? "background tasks cannot be counted" : `${pending} pending background tasks`,
      },
      accepting,
    ];
    // A backlog (deliveries to a receiver that is down, say) delays what follows the answers, not the answers:
    // it degrades Data Sync, but a server taken out of its balancer for it would answer no one. One account's
    // dead receivers could otherwise take the installation out of service for every account.
    return { checks, ready: database.ok && accepting.ok, backlog: pending };
  }

  ready(): boolean {
    return this.report().ready;
  }
}
