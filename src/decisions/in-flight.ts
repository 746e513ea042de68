import type { EntityKeys } from "../graph/entities.js";
import type { Tenant } from "../store/tenant.js";

/** The kinds whose decisions the velocity counters count (store/history.ts). */
const COUNTED_KINDS = ["user", "ip", "device", "email"] as const;
/** The kinds whose distinct users are counted. */
const SHARED_KINDS = ["device", "ip"] as const;
/**
 * Decisions, or users, of one entity a decide is told of, at most: past that many at once it is a burst
 * already (the thresholds are 5 and 10 a minute, and 3 and 10 users), and the engine looks each one up.
 */
const MAX_TOLD = 32;

type CountedKind = (typeof COUNTED_KINDS)[number];
type SharedKind = (typeof SHARED_KINDS)[number];

/**
 * What the decides still in flight (admitted, not yet stored) add to a new
 * decide's store reads: they are earlier requests, though the velocity
 * counters and distinct users may not hold them yet.
 */
export interface InFlightCounts {
  /**
   * The decision ids of the other decides in flight with this decide's key, per kind. The engine counts
   * those it does not find stored when it reads the counters: one stored meanwhile is in them already.
   */
  decisions: Record<CountedKind, string[]>;
  /** Users of other decides in flight on this decide's device and IP, this user left out. */
  users: Record<SharedKind, string[]>;
}

/** A decide admitted in flight; `release` once it is stored or has failed. */
export interface InFlightTicket {
  /** What the decides admitted before it add. */
  counts: InFlightCounts;
  release(): void;
}

/** Which decide of a burst this is. */
export interface AdmittedDecide {
  tenant: Tenant;
  keys: EntityKeys;
  userId: string;
  /** The id its decision will be stored under. */
  decisionId: string;
  /** Its Idempotency-Key, if it has one. */
  idempotencyKey?: string | undefined;
}

/**
 * Decides between their admission and their commit, per account,
 * environment and entity, on the request thread. The engine reads velocity
 * and distinct users from what is committed, and a decide is committed
 * milliseconds after its evaluation, in a batch: without these, the decides
 * of a burst sent at once (a bot's credential stuffing, a run of signups
 * from one device) would each see none of the others.
 *
 * A retry of a decide still in flight (the same Idempotency-Key) is not
 * counted: it will replay that one's answer, and store nothing of its own.
 */
export class DecisionsInFlight {
  /** Decision ids in flight per tenant and entity key. */
  private readonly decisions = new Map<string, Set<string>>();
  /** Their users per tenant and device or IP key, each with how many of its decides are in flight. */
  private readonly users = new Map<string, Map<string, number>>();
  /** Idempotency keys in flight per tenant. */
  private readonly idempotencyKeys = new Set<string>();

  admit({ tenant, keys, userId, decisionId, idempotencyKey }: AdmittedDecide): InFlightTicket {
    const scope = `${tenant.accountId}/${tenant.environment}\0`;
    const counts: InFlightCounts = { decisions: { user: [], ip: [], device: [], email: [] }, users: { device: [], ip: [] } };
    const retryKey = idempotencyKey === undefined ? undefined : scope + idempotencyKey;
    const counted = retryKey === undefined || !this.idempotencyKeys.has(retryKey);
    const decisionKeys: string[] = [];
    for (const kind of COUNTED_KINDS) {
      if (keys[kind] === "") continue;
      const key = scope + keys[kind];
      const ids = this.decisions.get(key);
      if (ids) for (const id of ids) if (counts.decisions[kind].length < MAX_TOLD) counts.decisions[kind].push(id);
      if (!counted) continue;
      if (ids) ids.add(decisionId);
      else this.decisions.set(key, new Set([decisionId]));
      decisionKeys.push(key);
    }
    const userKeys: string[] = [];
    for (const kind of SHARED_KINDS) {
      if (keys[kind] === "" || userId === "") continue;
      const key = scope + keys[kind];
      const users = this.users.get(key);
      if (users) for (const other of users.keys()) if (other !== userId && counts.users[kind].length < MAX_TOLD) counts.users[kind].push(other);
      if (!counted) continue;
      if (users) users.set(userId, (users.get(userId) ?? 0) + 1);
      else this.users.set(key, new Map([[userId, 1]]));
      userKeys.push(key);
    }
    if (counted && retryKey !== undefined) this.idempotencyKeys.add(retryKey);
    let released = !counted;
    return {
      counts,
      release: () => {
        if (released) return;
        released = true;
        for (const key of decisionKeys) {
          const ids = this.decisions.get(key);
          ids?.delete(decisionId);
          if (ids?.size === 0) this.decisions.delete(key);
        }
        for (const key of userKeys) {
          const users = this.users.get(key);
          const left = (users?.get(userId) ?? 1) - 1;
          if (left > 0) users?.set(userId, left);
          else users?.delete(userId);
          if (users?.size === 0) this.users.delete(key);
        }
        if (retryKey !== undefined) this.idempotencyKeys.delete(retryKey);
      },
    };
  }
}
