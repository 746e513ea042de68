import type { EntityKeys } from "../graph/entities.js";
import type { Tenant } from "../store/tenant.js";

/** The kinds whose decisions the velocity counters count (store/history.ts). */
const COUNTED_KINDS = ["user", "ip", "device", "email"] as const;
/** The kinds whose distinct users are counted. */
const SHARED_KINDS = ["device", "ip"] as const;
/**
 * Decides, or users, of one entity a decide is told of, at most, the newest first: above every threshold
 * the engine compares them with (100 a day is the highest), so that past it the signals are the same.
 */
const MAX_TOLD = 128;

type CountedKind = (typeof COUNTED_KINDS)[number];
type SharedKind = (typeof SHARED_KINDS)[number];

/**
 * What the decides still in flight (admitted, not yet stored) add to a new
 * decide's store reads: they are earlier requests, though the velocity
 * counters and distinct users may not hold them yet.
 */
export interface InFlightCounts {
  /**
   * The other decides in flight with this decide's key, per kind, each as the decision ids it may be stored
   * under: one id, or those of the attempts of one Idempotency-Key, of which at most one is stored. The
   * engine counts a decide none of whose ids it finds stored when it reads the counters; one stored meanwhile
   * is in them already.
   */
  decisions: Record<CountedKind, string[][]>;
  /** Users of other decides in flight on this decide's device and IP, this user left out. */
  users: Record<SharedKind, string[]>;
}

/** No decide in flight: what a read outside a burst adds. */
export const NONE_IN_FLIGHT: InFlightCounts = { decisions: { user: [], ip: [], device: [], email: [] }, users: { device: [], ip: [] } };

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
 * The attempts of one Idempotency-Key in flight at once count as one decide:
 * one of them is stored and the others replay its answer (or, if the first
 * fails, a retry is the one stored). A group keeps the ids of its attempts
 * until the last of them is released: the one stored, released first, must
 * still be named beside the retries that will replay it, or the engine would
 * count those as a decide not stored yet, on top of the stored one's counts.
 */
export class DecisionsInFlight {
  /** Per tenant and entity key, the decides in flight: their decision ids by attempt group, and how many of the group's attempts are not released. */
  private readonly decisions = new Map<string, Map<string, { ids: Set<string>; live: number }>>();
  /** Their users per tenant and device or IP key, each with how many of its decides are in flight. */
  private readonly users = new Map<string, Map<string, number>>();

  admit({ tenant, keys, userId, decisionId, idempotencyKey }: AdmittedDecide): InFlightTicket {
    const scope = `${tenant.accountId}/${tenant.environment}\0`;
    // A decide's attempts group: its Idempotency-Key's, or its own.
    const group = idempotencyKey === undefined ? `id\0${decisionId}` : `key\0${idempotencyKey}`;
    const counts: InFlightCounts = { decisions: { user: [], ip: [], device: [], email: [] }, users: { device: [], ip: [] } };
    const decisionKeys: string[] = [];
    for (const kind of COUNTED_KINDS) {
      if (keys[kind] === "") continue;
      const key = scope + keys[kind];
      let groups = this.decisions.get(key);
      if (groups) counts.decisions[kind] = newest([...groups].filter(([name]) => name !== group).map(([, { ids }]) => [...ids]));
      else this.decisions.set(key, (groups = new Map()));
      const attempts = groups.get(group);
      if (attempts) {
        attempts.ids.add(decisionId);
        attempts.live++;
      } else groups.set(group, { ids: new Set([decisionId]), live: 1 });
      decisionKeys.push(key);
    }
    const userKeys: string[] = [];
    for (const kind of SHARED_KINDS) {
      if (keys[kind] === "" || userId === "") continue;
      const key = scope + keys[kind];
      let users = this.users.get(key);
      if (users) counts.users[kind] = newest([...users.keys()].filter((other) => other !== userId));
      else this.users.set(key, (users = new Map()));
      users.set(userId, (users.get(userId) ?? 0) + 1);
      userKeys.push(key);
    }
    let released = false;
    return {
      counts,
      release: () => {
        if (released) return;
        released = true;
        for (const key of decisionKeys) {
          const groups = this.decisions.get(key);
          const attempts = groups?.get(group);
          // Its id stays while another attempt is in flight: stored, it is what that attempt replays.
          if (attempts && --attempts.live === 0) groups?.delete(group);
          if (groups?.size === 0) this.decisions.delete(key);
        }
        for (const key of userKeys) {
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

/** The last MAX_TOLD of a list in admission order: the newest, least likely stored already. */
function newest<T>(items: T[]): T[] {
  return items.length > MAX_TOLD ? items.slice(-MAX_TOLD) : items;
}
