// Store-backed signal categories (comprehensive path): velocity, amount,
// history, graph and consortium. The store reads a HistorySnapshot; turning
// it into signals is pure and lives here.

import { COUNTRIES, distanceKm } from "../countries.js";
import type {
  AmountSignals,
  ConsortiumSignals,
  EngineInput,
  FastSignals,
  GraphSignals,
  HistorySignals,
  HistorySnapshot,
  StoreSignals,
  VelocitySignals,
  WindowCounts,
} from "../types.js";

// Velocity thresholds count earlier requests only. An IP is shared by
// households, offices and mobile carriers' NAT, so its limits are higher.
const BURST_PER_MINUTE = 5;
const IP_BURST_PER_MINUTE = 10;
const HIGH_PER_HOUR = 20;
const IP_HIGH_PER_HOUR = 60;
const HIGH_PER_DAY = 100;
const IP_HIGH_PER_DAY = 500;
const MULTI_ACCOUNT_DEVICE_USERS = 3;
const MULTI_ACCOUNT_IP_USERS = 10;

/** Commercial flights cruise at ~900 km/h; faster country hops are not travel. */
const MAX_TRAVEL_SPEED_KMH = 1000;
/** Neighbouring countries' reference points can be this close while the users are not; ignore shorter hops. */
const MIN_TRAVEL_DISTANCE_KM = 500;

/** An amount this many times the user's largest earlier amount is a spike. */
const AMOUNT_SPIKE_RATIO = 3;
/** With only one or two earlier payments, a spike must be this much larger (a large jump). */
const AMOUNT_JUMP_RATIO = 10;
/** A user with little history paying this many times the account's typical payment: a first high-value purchase. */
const FIRST_HIGH_VALUE_RATIO = 5;
/** The account's payments in a currency before its typical payment means anything. */
const MIN_ACCOUNT_PAYMENTS = 20;
/** An amount this many times the user's average amount is unusual. */
const AMOUNT_UNUSUAL_RATIO = 3;
/** Fewer earlier payments than this are not a history to compare against. */
const MIN_AMOUNT_HISTORY = 3;
/**
 * Ratios stop here: any amount doubles allow can follow a tiny one (1e10 after 1e-300), and an infinite
 * ratio has no JSON form (the decision's evidence would fail to store). A billion times the user's usual is
 * as much a spike as any more.
 */
const MAX_AMOUNT_RATIO = 1e9;

const ZERO_COUNTS: WindowCounts = Object.freeze({ lastMinute: 0, lastHour: 0, lastDay: 0 });

/** Snapshot of a user, device, IP and e-mail the store has never seen. */
export const EMPTY_HISTORY_SNAPSHOT: HistorySnapshot = Object.freeze({
  counts: Object.freeze({ user: ZERO_COUNTS, ip: ZERO_COUNTS, device: ZERO_COUNTS, email: ZERO_COUNTS }),
  distinctUsersPerDevice24h: 0,
  distinctUsersPerIp24h: 0,
  previousDecision: null,
  knownDeviceIds: Object.freeze([]),
  knownCountries: Object.freeze([]),
  amountHistory: Object.freeze({}),
  accountAmounts: null,
  graph: null,
  consortium: null,
});

/** Graph signals when there is no graph answer: neutral, available = false. */
function neutralGraphSignals(): GraphSignals {
  return { available: false, linkedToFraud: false, hops: null, fraudNeighbours: 0 };
}

/** Consortium signals when there is no consortium answer: neutral, available = false; a fresh array each time. */
function neutralConsortiumSignals(): ConsortiumSignals {
  return { available: false, matches: 0, indicatorTypes: [] };
}

/**
 * Store categories when the comprehensive path did not run: present, neutral, available = false. A payment's
 * amount and currency are still shown: the request had an amount, so the amount category counts for
 * coverage, without data.
 */
export function unavailableStoreSignals(payment: { amount: number; currency: string } | null = null): StoreSignals {
  return {
    velocity: {
      available: false,
      user: { ...ZERO_COUNTS },
      ip: { ...ZERO_COUNTS },
      device: { ...ZERO_COUNTS },
      email: { ...ZERO_COUNTS },
      usersPerDevice24h: 0,
      usersPerIp24h: 0,
      burst: false,
      highHourly: false,
      highDaily: false,
      multiAccountDevice: false,
      multiAccountIp: false,
    },
    amount: {
      available: false,
      value: payment?.amount ?? null,
      currency: payment?.currency ?? "",
      historyCount: 0,
      historyMax: 0,
      historyMean: 0,
      ratioToMax: null,
      ratioToMean: null,
      spike: false,
      aboveUsual: false,
      newCurrency: false,
      accountTypical: null,
      firstHighValue: false,
    },
    history: {
      available: false,
      userKnown: false,
      newDevice: false,
      newCountry: false,
      previousCountry: "",
      secondsSincePrevious: null,
      travelDistanceKm: null,
      travelSpeedKmh: null,
      impossibleTravel: false,
    },
    graph: neutralGraphSignals(),
    consortium: neutralConsortiumSignals(),
  };
}

export function computeStoreSignals(
  input: EngineInput,
  snapshot: HistorySnapshot,
  fastSignals: FastSignals,
  nowMs: number = Date.now(),
): StoreSignals {
  return {
    velocity: velocitySignals(snapshot),
    amount: amountSignals(input, snapshot),
    history: historySignals(input, snapshot, fastSignals, nowMs),
    graph: snapshot.graph === null ? neutralGraphSignals() : { available: true, ...snapshot.graph },
    consortium:
      snapshot.consortium === null
        ? neutralConsortiumSignals()
        : {
            available: true,
            matches: snapshot.consortium.matches,
            indicatorTypes: [...snapshot.consortium.indicatorTypes],
          },
  };
}

function velocitySignals(snapshot: HistorySnapshot): VelocitySignals {
  const { user, ip, device, email } = snapshot.counts;
  const personal = [user, device, email];
  return {
    available: true,
    user: { ...user },
    ip: { ...ip },
    device: { ...device },
    email: { ...email },
    usersPerDevice24h: snapshot.distinctUsersPerDevice24h,
    usersPerIp24h: snapshot.distinctUsersPerIp24h,
    burst: personal.some((counts) => counts.lastMinute >= BURST_PER_MINUTE) || ip.lastMinute >= IP_BURST_PER_MINUTE,
    highHourly: personal.some((counts) => counts.lastHour >= HIGH_PER_HOUR) || ip.lastHour >= IP_HIGH_PER_HOUR,
    highDaily: personal.some((counts) => counts.lastDay >= HIGH_PER_DAY) || ip.lastDay >= IP_HIGH_PER_DAY,
    multiAccountDevice: snapshot.distinctUsersPerDevice24h >= MULTI_ACCOUNT_DEVICE_USERS,
    multiAccountIp: snapshot.distinctUsersPerIp24h >= MULTI_ACCOUNT_IP_USERS,
  };
}

/** The actions that move money: only their amounts are compared with, and join, the user's history. */
const PAYMENT_ACTIONS: ReadonlySet<string> = new Set(["checkout", "purchase", "transfer", "custom"]);

/**
 * The request's payment: an amount with its currency on an action that moves money. An amount on a login, or
 * without a currency, cannot be compared with anything the user paid (and is not added to the user's history).
 */
export function paymentOf(input: Pick<EngineInput, "action" | "amount" | "currency">): { amount: number; currency: string } | null {
  const currency = (input.currency ?? "").toUpperCase();
  if (input.amount === undefined || currency === "" || !PAYMENT_ACTIONS.has(input.action)) return null;
  return { amount: input.amount, currency };
}

/**
 * The IP country that says where the user is, "" when the IP says nothing of it: a datacenter range's or a Tor
 * exit's country is that of the cloud VM, VPN, proxy or relay the user goes through, wherever the user is (a
 * private or reserved address has no country to begin with). Only this country joins the user's profile
 * (known countries, the last location), and travel is measured only between two of them: a VPN exit abroad is
 * neither a new country nor a flight, and does not make the user's next request from home look like one.
 */
export function userLocationCountry({ network, geo }: Pick<FastSignals, "network" | "geo">): string {
  return network.datacenter || network.tor ? "" : geo.country;
}

function amountSignals(input: EngineInput, snapshot: HistorySnapshot): AmountSignals {
  const payment = paymentOf(input);
  const value = payment?.amount ?? null;
  const currency = payment?.currency ?? "";
  const stats = snapshot.amountHistory[currency] ?? { count: 0, max: 0, mean: 0 };
  const ratio = (reference: number): number | null =>
    value !== null && reference > 0 ? Math.min(Math.round((value / reference) * 1000) / 1000, MAX_AMOUNT_RATIO) : null;
  const ratioToMax = ratio(stats.max);
  const ratioToMean = ratio(stats.mean);
  // Thresholds compare the amounts themselves: the ratios are rounded to 3 decimals for display, and 2.9999
  // shown as 3 is not three times the reference.
  const atLeast = (factor: number, reference: number): boolean => value !== null && reference > 0 && value >= factor * reference;
  const enoughHistory = stats.count >= MIN_AMOUNT_HISTORY;
  const spikeRatio = enoughHistory ? AMOUNT_SPIKE_RATIO : AMOUNT_JUMP_RATIO;
  const spike = stats.count > 0 && atLeast(spikeRatio, stats.max);
  const paidBefore = Object.values(snapshot.amountHistory).some((other) => other.count > 0);
  const account = snapshot.accountAmounts;
  const typical = value !== null && account !== null && account.count >= MIN_ACCOUNT_PAYMENTS ? Math.exp(account.logMean) : null;
  // Rounded for display only: a typical payment under 0.0005 shows as 0, and every amount is at least 5 × 0.
  const accountTypical = typical === null ? null : Math.round(typical * 1000) / 1000;
  return {
    available: true,
    value,
    currency,
    historyCount: stats.count,
    historyMax: stats.max,
    historyMean: stats.mean,
    ratioToMax,
    ratioToMean,
    spike,
    aboveUsual: enoughHistory && !spike && atLeast(AMOUNT_UNUSUAL_RATIO, stats.mean),
    newCurrency: value !== null && stats.count === 0 && paidBefore,
    accountTypical,
    firstHighValue: !enoughHistory && !spike && typical !== null && atLeast(FIRST_HIGH_VALUE_RATIO, typical),
  };
}

function historySignals(
  input: EngineInput,
  snapshot: HistorySnapshot,
  fastSignals: FastSignals,
  nowMs: number,
): HistorySignals {
  // The last location is that of a decision whose IP had a country; a profile begun by one without (a private
  // address) has none yet, and a user whose profile holds no location, device or country is not known.
  const previous = snapshot.previousDecision !== null && snapshot.previousDecision.country !== "" ? snapshot.previousDecision : null;
  const userKnown = previous !== null || snapshot.knownDeviceIds.length > 0 || snapshot.knownCountries.length > 0;
  const deviceId = input.deviceId ?? "";
  const country = userLocationCountry(fastSignals);

  let secondsSincePrevious: number | null = null;
  let travelDistanceKm: number | null = null;
  let travelSpeedKmh: number | null = null;
  if (previous !== null) {
    secondsSincePrevious = Math.max(0, Math.round((nowMs - previous.atMs) / 1000));
    const from = COUNTRIES.get(previous.country);
    const to = COUNTRIES.get(country);
    if (from !== undefined && to !== undefined) {
      travelDistanceKm = Math.round(distanceKm(from, to));
      // At least one minute, so two requests in the same second do not divide by zero.
      const hours = Math.max(secondsSincePrevious, 60) / 3600;
      travelSpeedKmh = Math.round(travelDistanceKm / hours);
    }
  }

  return {
    available: true,
    userKnown,
    newDevice: userKnown && deviceId !== "" && !snapshot.knownDeviceIds.includes(deviceId),
    newCountry: snapshot.knownCountries.length > 0 && country !== "" && !snapshot.knownCountries.includes(country),
    previousCountry: previous?.country ?? "",
    secondsSincePrevious,
    travelDistanceKm,
    travelSpeedKmh,
    impossibleTravel:
      travelDistanceKm !== null &&
      travelSpeedKmh !== null &&
      travelDistanceKm >= MIN_TRAVEL_DISTANCE_KM &&
      travelSpeedKmh > MAX_TRAVEL_SPEED_KMH,
  };
}
