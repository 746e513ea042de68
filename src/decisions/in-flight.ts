import type { EntityKeys } from "../graph/entities.js";
import type { Tenant } from "../store/tenant.js";

/** The kinds whose decisions the velocity counters count (store/history.ts). */
const COUNTED_KINDS = ["user", "ip", "device", "email"] as const;
/** The kinds whose distinct users are counted. */
const SHARED_KINDS = ["device", "ip"] as const;
/** Users of one device or IP a decide is told of, at most: past that many at once, it is a burst already. */
const MAX_USERS_TOLD = 32;

type CountedKind = (typeof COUNTED_KINDS)[number];
type SharedKind = (typeof SHARED_KINDS)[number];

/**
 * What the decides still in flight (admitted, not yet stored) add to a new
 * decide's store reads: they are earlier requests, though the velocity
 * counters and distinct users do not hold them yet.
 */
export interface InFlightCounts {
  /** Other decides in flight with this decide's key, per kind. */
  decisions: Record<CountedKind, number>;
  /** Users of other decides in flight on this decide's device and IP, this user left out (at most 32 each). */
  users: Record<SharedKind, string[]>;
}

/** A decide counted in flight; `release` once it is stored or has failed. */
export interface InFlightTicket {
  /** What the decides admitted before it add. */
  counts: InFlightCounts;
  release(): void;
}

/**
 * Decides between their admission and their commit, per account,
 * environment and entity, on the request thread. The engine reads velocity
 * and distinct users from what is committed, and a decide is committed
 * milliseconds after its evaluation, in a batch: without these, the decides
 * of a burst sent at once (a bot's credential stuffing, a run of signups
 * from one device) would each see none of the others. A decide that commits
 * while another is being evaluated may be counted twice for it, committed and
 * in flight: an over-estimate of one batch at most, never an under-estimate.
 */
export class DecisionsInFlight {
  /** Decides in flight per tenant and entity key. */
  private readonly decisions = new Map<string, number>();
  /** Their users per tenant and device or IP key, each with how many of its decides are in flight. */
  private readonly users = new Map<string, Map<string, number>>();

  admit(tenant: Tenant, keys: EntityKeys, userId: string): InFlightTicket {
    const scope = `${tenant.accountId}/${tenant.environment}\0`;
    const counts: InFlightCounts = { decisions: { user: 0, ip: 0, device: 0, email: 0 }, users: { device: [], ip: [] } };
    const counted: string[] = [];
    for (const kind of COUNTED_KINDS) {
      if (keys[kind] === "") continue;
      const key = scope + keys[kind];
      const before = this.decisions.get(key) ?? 0;
      counts.decisions[kind] = before;
      this.decisions.set(key, before + 1);
      counted.push(key);
    }
    const named: string[] = [];
    for (const kind of SHARED_KINDS) {
      if (keys[kind] === "" || userId === "") continue;
      const key = scope + keys[kind];
      const users = this.users.get(key) ?? new Map<string, number>();
      for (const other of users.keys()) {
        if (other !== userId && counts.users[kind].length < MAX_USERS_TOLD) counts.users[kind].push(other);
      }
      users.set(userId, (users.get(userId) ?? 0) + 1);
      this.users.set(key, users);
      named.push(key);
    }
    let released = false;
    return {
      counts,
      release: () => {
        if (released) return;
        released = true;
        for (const key of counted) {
          const left = (this.decisions.get(key) ?? 1) - 1;
          if (left > 0) this.decisions.set(key, left);
          else this.decisions.delete(key);
        }
        for (const key of named) {
          const users = this.users.get(key);
          const left = (users?.get(userId) ?? 1) - 1;
          if (left > 0) users?.set(userId, left);
          else users?.delete(userId);
          if (users?.size === 0) this.users.delete(key);
        }
      },
    };
  }
}
