import type { AccountAmountStats, AmountStats, HistorySnapshot, WindowCounts } from "../engine/index.js";
import type { EntityKeys } from "../graph/entities.js";
import type { Db } from "./database.js";
import { PRUNE_STEP_ROWS, nextTurn } from "./prune-steps.js";
import type { Tenant } from "./tenant.js";
import { NONE_IN_FLIGHT, type InFlightCounts } from "../decisions/in-flight.js";

const MINUTE = 60_000;
const HOUR = 3_600_000;
const DAY = 86_400_000;
/** How many devices and countries a user profile remembers (most recent first). */
const PROFILE_MEMORY = 50;

/** The entities a decision is counted under; "" when the request did not carry it. */
export interface DecisionEntities {
  userId: string;
  ip: string;
  deviceId: string;
  email: string;
  /** Card and bank-account identifiers from the request's metadata; the fraud graph links them (src/graph). */
  cardFingerprint?: string;
  accountNumber?: string;
}

/** What a request the user made teaches the user's profile: its device, IP country and payment. */
export interface ProfileLesson {
  userId: string;
  deviceId: string;
  /** The country the request's IP locates the user in (engine userLocationCountry): "" for a datacenter, Tor or non-public address. */
  country: string;
  /** The payment, if the request was one (engine paymentOf); otherwise undefined and "". */
  amount: number | undefined;
  currency: string;
}

/** A request's payment (engine paymentOf) as a lesson records it: its amount and currency, or none. */
export function lessonPayment(payment: { amount: number; currency: string } | null): Pick<ProfileLesson, "amount" | "currency"> {
  return { amount: payment?.amount, currency: payment?.currency ?? "" };
}

/** What a decision adds to the history once it is made. */
export interface HistoryUpdate extends DecisionEntities, ProfileLesson {
  /**
   * The decision allowed the request. Only then does it teach the user's
   * profile (its device, country and amount become the user's, its time and
   * country the user's last location): an attacker challenged or denied from
   * a new device must not make that device known by retrying. Every attempt
   * counts in the velocity counters.
   */
  allowed: boolean;
}

interface VelocityRow {
  minute_start: number;
  minute_current: number;
  minute_previous: number;
  hour_start: number;
  hour_current: number;
  hour_previous: number;
  day_start: number;
  day_current: number;
  day_previous: number;
}

interface ProfileRow {
  last_decision_at: number;
  last_country: string;
  known_devices: string;
  known_countries: string;
  amounts: string;
}

/** Sliding-window estimate from a window's current and previous bucket. */
function estimate(start: number, current: number, previous: number, windowMs: number, now: number): number {
  const bucket = now - (now % windowMs);
  const elapsed = (now - bucket) / windowMs;
  // Rounded, not floored: the previous window's share is an estimate either way, and flooring it let a burst
  // across a minute boundary (five requests at :50 to :54, a sixth at :05) read as four.
  if (start === bucket) return Math.round(previous * (1 - elapsed)) + current;
  if (bucket - start === windowMs) return Math.round(current * (1 - elapsed));
  // Decides whose time is past this one's bucket were stored first (concurrent decides across a boundary, or
  // the clock stepped back) and moved the row on: its previous bucket is this one's own, and its current one
  // holds those later decides, which count as the decides in flight do. Only the bucket before this one's is
  // gone from the row: an estimate short of that share, where it read 0.
  if (start - bucket === windowMs) return previous + current;
  return 0;
}

/**
 * The windowed tables, with their primary keys and what makes a row outdated: a velocity counter whose day
 * window and the one before it have passed (`estimate` reads it as 0 in every window), and the distinct users
 * of a day before yesterday (read for today and yesterday only). Deleted, such a row is what its next write
 * would start from anyway: its counts begin again at 1.
 */
const WINDOWED_TABLES = [
  { table: "velocity_counters", key: ["account_id", "environment", "entity"], outdated: "day_start < @dayStartCutoff" },
  { table: "entity_users", key: ["account_id", "environment", "entity", "day", "user_id"], outdated: "day < @dayCutoff" },
  { table: "entity_user_counts", key: ["account_id", "environment", "entity", "day"], outdated: "day < @dayCutoff" },
] as const;

type KeyValues = Array<string | number>;

/**
 * Walks one table in primary-key order, PRUNE_STEP_ROWS rows read per step (prune-steps.ts), deleting its
 * outdated rows: no index orders them by age, and one per table would cost every decide's writes.
 */
class WindowedTablePruner {
  private readonly stepEndStmt;
  private readonly deleteStepStmt;
  private readonly deleteRestStmt;
  /** A key before every row's. */
  private readonly start: KeyValues;

  constructor(db: Db, { table, key, outdated }: (typeof WINDOWED_TABLES)[number]) {
    const columns = key.join(", ");
    const after = `(${columns}) > (${key.map(() => "?").join(", ")})`;
    const upTo = `(${columns}) <= (${key.map(() => "?").join(", ")})`;
    this.stepEndStmt = db.prepare(`SELECT ${columns} FROM ${table} WHERE ${after} ORDER BY ${columns} LIMIT 1 OFFSET ${PRUNE_STEP_ROWS - 1}`).raw();
    this.deleteStepStmt = db.prepare(`DELETE FROM ${table} WHERE ${after} AND ${upTo} AND ${outdated}`);
    this.deleteRestStmt = db.prepare(`DELETE FROM ${table} WHERE ${after} AND ${outdated}`);
    // Account ids are never empty, so the first column decides.
    this.start = key.map((column) => (column === "day" ? -1 : ""));
  }

  /** Deletes the table's outdated rows, yielding to the event loop between steps, until done or stopped; returns how many. */
  async prune(cutoffs: { dayStartCutoff: number; dayCutoff: number }, stopped: () => boolean): Promise<number> {
    let deleted = 0;
    let from = this.start;
    for (;;) {
      const to = this.stepEndStmt.get(...from) as KeyValues | undefined;
      if (to === undefined) return deleted + this.deleteRestStmt.run(...from, cutoffs).changes;
      deleted += this.deleteStepStmt.run(...from, ...to, cutoffs).changes;
      from = to;
      await nextTurn();
      if (stopped()) return deleted;
    }
  }
}

/**
 * The comprehensive path's store: velocity counters, distinct users per device
 * and IP, and one profile row per user. Every read and write touches a fixed
 * number of rows by primary key, whatever the history's size.
 */
export class HistoryRepository {
  private readonly velocityStmt;
  private readonly bumpVelocityStmt;
  private readonly usersStmt;
  private readonly seenOnDayStmt;
  private readonly addUserStmt;
  private readonly bumpUsersStmt;
  private readonly accountAmountsStmt;
  private readonly addAccountAmountStmt;
  private readonly profileStmt;
  private readonly saveProfileStmt;
  private readonly storedAmongStmt;
  private readonly readTx: <T>(read: () => T) => T;

  private readonly pruners;

  constructor(private readonly db: Db) {
    this.pruners = WINDOWED_TABLES.map((table) => new WindowedTablePruner(db, table));
    this.velocityStmt = db.prepare<[string, string, string], VelocityRow>(
      "SELECT * FROM velocity_counters WHERE account_id = ? AND environment = ? AND entity = ?",
    );
    const roll = (name: string, param: string, windowMs: number) => `
      ${name}_previous = CASE WHEN ${name}_start = @${param} THEN ${name}_previous
                              WHEN @${param} - ${name}_start = ${windowMs} THEN ${name}_current ELSE 0 END,
      ${name}_current = CASE WHEN ${name}_start = @${param} THEN ${name}_current + 1 ELSE 1 END,
      ${name}_start = @${param}`;
    this.bumpVelocityStmt = db.prepare(
      `INSERT INTO velocity_counters VALUES (@accountId, @environment, @entity, @minute, 1, 0, @hour, 1, 0, @day, 1, 0)
       ON CONFLICT DO UPDATE SET ${roll("minute", "minute", MINUTE)}, ${roll("hour", "hour", HOUR)}, ${roll("day", "day", DAY)}`,
    );
    this.usersStmt = db.prepare<[string, string, string, number], { day: number; users: number; carried: number }>(
      "SELECT day, users, carried FROM entity_user_counts WHERE account_id = ? AND environment = ? AND entity = ? AND day >= ?",
    );
    this.seenOnDayStmt = db.prepare<[string, string, string, number, string], { one: number }>(
      "SELECT 1 AS one FROM entity_users WHERE account_id = ? AND environment = ? AND entity = ? AND day = ? AND user_id = ?",
    );
    this.addUserStmt = db.prepare<[string, string, string, number, string]>(
      "INSERT OR IGNORE INTO entity_users VALUES (?, ?, ?, ?, ?)",
    );
    this.bumpUsersStmt = db.prepare<{ accountId: string; environment: string; entity: string; day: number; carried: number }>(
      `INSERT INTO entity_user_counts VALUES (@accountId, @environment, @entity, @day, 1, @carried)
       ON CONFLICT DO UPDATE SET users = users + 1, carried = carried + @carried`,
    );
    this.accountAmountsStmt = db.prepare<[string, string, string], { payments: number; log_sum: number }>(
      "SELECT payments, log_sum FROM account_amounts WHERE account_id = ? AND environment = ? AND currency = ?",
    );
    this.addAccountAmountStmt = db.prepare<{ accountId: string; environment: string; currency: string; logAmount: number }>(
      `INSERT INTO account_amounts VALUES (@accountId, @environment, @currency, 1, @logAmount)
       ON CONFLICT DO UPDATE SET payments = payments + 1, log_sum = log_sum + @logAmount`,
    );
    this.storedAmongStmt = db.prepare<[string], { id: string }>("SELECT id FROM decisions WHERE id IN (SELECT value FROM json_each(?))");
    const tx = db.transaction((read: () => unknown) => read());
    this.readTx = <T>(read: () => T): T => tx(read) as T;
    this.profileStmt = db.prepare<[string, string, string], ProfileRow>(
      "SELECT * FROM user_profiles WHERE account_id = ? AND environment = ? AND user_id = ?",
    );
    this.saveProfileStmt = db.prepare(
      `INSERT INTO user_profiles VALUES (@accountId, @environment, @userId, @at, @country, @devices, @countries, @amounts)
       ON CONFLICT DO UPDATE SET last_decision_at = @at, last_country = @country,
         known_devices = @devices, known_countries = @countries, amounts = @amounts`,
    );
  }

  /**
   * Deletes the windowed counters no window reads any more (`WINDOWED_TABLES`), a step at a time with a turn
   * of the event loop between steps, so that neither the request thread nor the decision writer waits long;
   * ends early once `stopped` says so (the server closing). Returns how many rows went. User profiles stay:
   * they are the user's history, not a window.
   */
  async pruneOutdated(now: number, stopped: () => boolean = () => false): Promise<number> {
    const dayStart = now - (now % DAY);
    const cutoffs = { dayStartCutoff: dayStart - DAY, dayCutoff: Math.floor(now / DAY) - 1 };
    let deleted = 0;
    for (const pruner of this.pruners) if (!stopped()) deleted += await pruner.prune(cutoffs, stopped);
    return deleted;
  }

  /**
   * What the store knows before this request (earlier decisions only). `keys`
   * are the entities' keys as the graph keys them (graph/entities.ts:
   * canonical e-mail, an IPv6 address as its /64, so neither a notation
   * variant nor another address of the prefix starts a fresh count); the
   * caller computes them once for both.
   */
  snapshot(tenant: Tenant, entities: DecisionEntities, keys: EntityKeys, now: number, paymentCurrency = "", inFlight: InFlightCounts = NONE_IN_FLIGHT): HistorySnapshot {
    const inFlightIds = [...new Set(Object.values(inFlight.decisions).flat(2))];
    const read = () => this.read(tenant, entities, keys, now, paymentCurrency, inFlight, inFlightIds);
    // One read transaction: which decides in flight are stored, and the counters, as of one moment. Read
    // apart, one committed in between would count twice (or, the other way round, not at all).
    return inFlightIds.length > 0 && !this.db.inTransaction ? this.readTx(read) : read();
  }

  private read(
    tenant: Tenant,
    entities: DecisionEntities,
    keys: EntityKeys,
    now: number,
    paymentCurrency: string,
    inFlight: InFlightCounts,
    inFlightIds: readonly string[],
  ): HistorySnapshot {
    // Decides still in flight (decisions/in-flight.ts) are earlier requests: those the counters do not hold
    // yet (none of their ids stored when read here: a decision and its counts commit together) count as now.
    const stored = new Set(inFlightIds.length === 0 ? [] : this.storedAmongStmt.all(JSON.stringify(inFlightIds)).map((row) => row.id));
    const counts = (entity: string, decides: readonly (readonly string[])[]): WindowCounts => {
      if (!entity) return { lastMinute: 0, lastHour: 0, lastDay: 0 };
      const pending = decides.reduce((sum, ids) => sum + (ids.some((id) => stored.has(id)) ? 0 : 1), 0);
      const row = this.velocityStmt.get(tenant.accountId, tenant.environment, entity);
      if (!row) return { lastMinute: pending, lastHour: pending, lastDay: pending };
      return {
        lastMinute: estimate(row.minute_start, row.minute_current, row.minute_previous, MINUTE, now) + pending,
        lastHour: estimate(row.hour_start, row.hour_current, row.hour_previous, HOUR, now) + pending,
        lastDay: estimate(row.day_start, row.day_current, row.day_previous, DAY, now) + pending,
      };
    };
    const profile = entities.userId ? this.profileStmt.get(tenant.accountId, tenant.environment, entities.userId) : undefined;
    const decides = inFlight.decisions;
    return {
      counts: { user: counts(keys.user, decides.user), ip: counts(keys.ip, decides.ip), device: counts(keys.device, decides.device), email: counts(keys.email, decides.email) },
      distinctUsersPerDevice24h: this.distinctUsers(tenant, keys.device, entities.userId, now, inFlight.users.device),
      distinctUsersPerIp24h: this.distinctUsers(tenant, keys.ip, entities.userId, now, inFlight.users.ip),
      previousDecision: profile ? { atMs: profile.last_decision_at, country: profile.last_country } : null,
      knownDeviceIds: profile ? (JSON.parse(profile.known_devices) as string[]) : [],
      knownCountries: profile ? (JSON.parse(profile.known_countries) as string[]) : [],
      amountHistory: profile ? (JSON.parse(profile.amounts) as Record<string, AmountStats>) : {},
      accountAmounts: this.accountAmounts(tenant, paymentCurrency),
      graph: null,
      consortium: null,
    };
  }

  /** Counts a decision under its entities (keyed as for {@link snapshot}) and updates the user's profile. Call inside a transaction. */
  record(tenant: Tenant, update: HistoryUpdate, keys: EntityKeys, now: number): void {
    const { accountId, environment } = tenant;
    const windows = { minute: now - (now % MINUTE), hour: now - (now % HOUR), day: now - (now % DAY) };
    for (const entity of [keys.user, keys.ip, keys.device, keys.email]) {
      if (entity) this.bumpVelocityStmt.run({ accountId, environment, entity, ...windows });
    }
    const day = Math.floor(now / DAY);
    for (const entity of [keys.device, keys.ip]) {
      if (entity && update.userId && this.addUserStmt.run(accountId, environment, entity, day, update.userId).changes === 1) {
        const carried = this.seenOnDayStmt.get(accountId, environment, entity, day - 1, update.userId) === undefined ? 0 : 1;
        this.bumpUsersStmt.run({ accountId, environment, entity, day, carried });
      }
    }
    if (update.allowed) this.learn(tenant, update, now);
  }

  /**
   * Adds a request the user really made to the user's profile: an allowed
   * decision's ({@link record}), or one that feedback labels legitimate
   * afterwards (a challenge the user passed). Its device, country and payment
   * become the user's; its time and country become the last location unless
   * a later one is known. Call inside a transaction.
   */
  learn(tenant: Tenant, lesson: ProfileLesson, at: number): void {
    const { accountId, environment } = tenant;
    if (!lesson.userId) return;
    const profile = this.profileStmt.get(accountId, environment, lesson.userId);
    const remember = (json: string | undefined, value: string): string => {
      const list = json ? (JSON.parse(json) as string[]) : [];
      if (!value) return JSON.stringify(list);
      return JSON.stringify([value, ...list.filter((item) => item !== value)].slice(0, PROFILE_MEMORY));
    };
    const amounts = profile ? (JSON.parse(profile.amounts) as Record<string, AmountStats>) : {};
    // A zero amount (a free order, a trial) says nothing about what the user or the account pays, and left in
    // the user's figures it would hide the first real payment's size (any amount is "no jump" from a max of 0).
    if (lesson.amount !== undefined && lesson.amount > 0 && lesson.currency) {
      this.addAccountAmountStmt.run({ accountId, environment, currency: lesson.currency, logAmount: Math.log(lesson.amount) });
      const stats = amounts[lesson.currency] ?? { count: 0, max: 0, mean: 0 };
      amounts[lesson.currency] = {
        count: stats.count + 1,
        max: Math.max(stats.max, lesson.amount),
        mean: stats.mean + (lesson.amount - stats.mean) / (stats.count + 1),
      };
    }
    // The last location is the latest decision whose IP has a country: travel is measured from there, and from then.
    // A profile begun without a country has no location yet, so any lesson with one, even an earlier one, is it.
    const located = profile === undefined || (lesson.country !== "" && (profile.last_country === "" || at >= profile.last_decision_at));
    this.saveProfileStmt.run({
      accountId,
      environment,
      userId: lesson.userId,
      at: located ? at : profile.last_decision_at,
      country: located ? lesson.country : profile.last_country,
      devices: remember(profile?.known_devices, lesson.deviceId),
      countries: remember(profile?.known_countries, lesson.country),
      amounts: JSON.stringify(amounts),
    });
  }

  /** The account's allowed payments in a currency; null without a currency or before the first. */
  private accountAmounts(tenant: Tenant, currency: string): AccountAmountStats | null {
    if (currency === "") return null;
    const row = this.accountAmountsStmt.get(tenant.accountId, tenant.environment, currency);
    return row ? { count: row.payments, logMean: row.log_sum / row.payments } : null;
  }

  /**
   * Distinct users of a device or IP over the sliding day, this user
   * included: today's users, and yesterday's users not seen again today
   * weighted by how much of yesterday the sliding day still holds. A user
   * seen on both days counts once.
   */
  private distinctUsers(tenant: Tenant, entity: string, userId: string, now: number, usersInFlight: readonly string[]): number {
    if (!entity) return 0;
    const { accountId, environment } = tenant;
    const today = Math.floor(now / DAY);
    let todayUsers = 0;
    let carried = 0;
    let yesterdayUsers = 0;
    for (const row of this.usersStmt.all(accountId, environment, entity, today - 1)) {
      if (row.day === today) {
        todayUsers = row.users;
        carried = row.carried;
      } else {
        yesterdayUsers = row.users;
      }
    }
    let yesterdayOnly = Math.max(0, yesterdayUsers - carried);
    // This user, and those of the decides in flight: each counts in full now, unless already counted today;
    // one seen yesterday is no longer among yesterday's.
    for (const user of userId === "" ? usersInFlight : [userId, ...usersInFlight]) {
      if (this.seenOnDayStmt.get(accountId, environment, entity, today, user) !== undefined) continue;
      todayUsers++;
      if (yesterdayOnly > 0 && this.seenOnDayStmt.get(accountId, environment, entity, today - 1, user) !== undefined) yesterdayOnly--;
    }
    return todayUsers + Math.round(yesterdayOnly * (1 - (now % DAY) / DAY));
  }
}
