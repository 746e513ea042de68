// Keeps webhook deliveries away from the service's own network (SSRF): no
// private, loopback, link-local or otherwise special address, checked when an
// endpoint is saved and again on every connection, because the name that
// resolved to a public address at save time can resolve to 127.0.0.1 later
// (DNS rebinding). FRAUD_WEBHOOK_ALLOW_PRIVATE=true lifts the private ranges
// for installations whose receivers live on the same network.

import { promises as dnsPromises } from "node:dns";
import type { LookupAddress, LookupOptions } from "node:dns";
import type { LookupFunction } from "node:net";
import { classifyIp, isPrivateRangeType, parseIp } from "../engine/ip.js";
import type { IpRangeType, ParsedIp } from "../engine/ip.js";

export interface GuardOptions {
  /** FRAUD_WEBHOOK_ALLOW_PRIVATE: allow private, CGNAT, loopback, link-local and unique-local addresses. */
  allowPrivate: boolean;
}

export type WebhookUrlProblemCode =
  | "invalid_url"
  | "unsupported_scheme"
  | "insecure_scheme"
  | "credentials_in_url"
  | "blocked_hostname"
  | "blocked_address"
  | "unresolvable_host";

/**
 * The problems the URL's text shows by itself, whatever FRAUD_WEBHOOK_ALLOW_PRIVATE and DNS say (a URL that is
 * not one, another scheme, credentials, port 0). {@link checkWebhookUrl} reports them before any of its host.
 */
export const MALFORMED_URL_PROBLEMS: ReadonlySet<WebhookUrlProblemCode> = new Set(["invalid_url", "unsupported_scheme", "credentials_in_url"]);

export interface WebhookUrlProblem {
  code: WebhookUrlProblemCode;
  message: string;
}

/** Names that mean this host whatever DNS says (RFC 6761), answered from /etc/hosts rather than DNS. */
const LOCAL_HOSTNAME = /^(?:localhost|localhost\.localdomain|.+\.localhost)$/;

const NAT64_PREFIX = 0x0064ff9bn << 96n; // 64:ff9b::/96, RFC 6052
const SIX_TO_FOUR_PREFIX = 0x2002n; // 2002::/16, RFC 3056
const TEREDO_PREFIX = 0x20010000n; // 2001::/32, RFC 4380

/**
 * Why a destination address is refused, or undefined when it is allowed.
 * Everything that is not public unicast is refused; the private ranges only
 * while allowPrivate is off. IPv4-mapped addresses are judged as the IPv4
 * address they carry (parseIp unwraps them), and so are the IPv4 addresses
 * inside NAT64 and 6to4 addresses, which gateways turn back into IPv4.
 */
export function addressProblem(address: string, options: GuardOptions): string | undefined {
  const ip = parseIp(address);
  if (ip === null) return `${address} is not an IP address`;
  const rangeType = rangeOf(ip);
  if (rangeType === "public") return undefined;
  // The private ranges (isPrivateRangeType) are what FRAUD_WEBHOOK_ALLOW_PRIVATE opens: reachable only
  // inside a network or host, but real destinations there.
  if (isPrivateRangeType(rangeType)) {
    return options.allowPrivate
      ? undefined
      : `${ip.text} is ${describe(rangeType)} address (set FRAUD_WEBHOOK_ALLOW_PRIVATE=true to allow it)`;
  }
  return `${ip.text} is ${describe(rangeType)} address, never a webhook destination`;
}

function rangeOf(ip: ParsedIp): IpRangeType {
  if (ip.version === 6) {
    if (ip.value >> 32n === NAT64_PREFIX >> 32n) return embeddedIpv4Range(ip.value & 0xffffffffn);
    if (ip.value >> 112n === SIX_TO_FOUR_PREFIX) return embeddedIpv4Range((ip.value >> 80n) & 0xffffffffn);
    // Teredo hides its IPv4 server and client obfuscated; nobody needs it to reach a webhook.
    if (ip.value >> 96n === TEREDO_PREFIX) return "reserved";
  }
  return classifyIp(ip);
}

function embeddedIpv4Range(value: bigint): IpRangeType {
  return classifyIp({ version: 4, value: Number(value), text: "" });
}

/** The range's name with its article, as "{address} is ... address" reads it. */
function describe(rangeType: IpRangeType): string {
  const names: Record<IpRangeType, string> = {
    public: "a public",
    private: "a private (RFC 1918)",
    cgnat: "a shared (CGNAT, RFC 6598)",
    loopback: "a loopback",
    linkLocal: "a link-local",
    uniqueLocal: "a unique-local (fc00::/7)",
    documentation: "a documentation",
    multicast: "a multicast",
    unspecified: "the unspecified",
    reserved: "a reserved",
  };
  return names[rangeType];
}

/** C0 controls (tab and line breaks among them) and DEL. */
const CONTROL_CHARACTER = /[\u0000-\u001f\u007f]/;

/**
 * The checks that need no network, for saving an endpoint and before every
 * connection: an absolute https URL (http too when private destinations are
 * allowed) without user name or password, whose host is not a local name and,
 * when it is an IP literal, not refused.
 * The URL parser has already turned tricks like http://0x7f.1/ or
 * http://2130706433/ into 127.0.0.1, so they are judged as such.
 */
export function checkWebhookUrl(url: string, options: GuardOptions): WebhookUrlProblem | undefined {
  // The URL parser drops tabs and line breaks anywhere and spaces at the ends: the URL saved and listed would
  // not be the one delivered to, and a line break would travel on to whatever shows or logs it.
  if (url !== url.trim() || CONTROL_CHARACTER.test(url)) {
    return { code: "invalid_url", message: "the URL must not contain control characters, line breaks, or spaces at its ends" };
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return { code: "invalid_url", message: "not an absolute URL" };
  }
  if (parsed.protocol !== "https:" && parsed.protocol !== "http:") {
    return { code: "unsupported_scheme", message: `${parsed.protocol} URLs are not allowed; use https (or http)` };
  }
  // Credentials would be sent to the receiver on every delivery and shown wherever the URL is listed.
  if (parsed.username !== "" || parsed.password !== "") {
    return { code: "credentials_in_url", message: "the URL must not contain a user name or password" };
  }
  // Port 0 names no port a receiver can listen on: every delivery would fail (the URL parser drops a
  // scheme's default port, which leaves port "" for those).
  if (parsed.port === "0") return { code: "invalid_url", message: "the URL's port must be from 1 to 65535" };
  const host = hostOf(parsed);
  if (parseIp(host) !== null) {
    const problem = addressProblem(host, options);
    if (problem !== undefined) return { code: "blocked_address", message: problem };
  } else if (!options.allowPrivate && LOCAL_HOSTNAME.test(host.toLowerCase().replace(/\.$/, ""))) {
    return { code: "blocked_hostname", message: `${host} names this host (set FRAUD_WEBHOOK_ALLOW_PRIVATE=true to allow it)` };
  }
  // Events carry user ids, e-mail addresses and scores: across networks they travel encrypted. Plain http is
  // for receivers on the same network, which the same setting lets in.
  if (parsed.protocol === "http:" && !options.allowPrivate) {
    return { code: "insecure_scheme", message: "the URL must use https (http only with FRAUD_WEBHOOK_ALLOW_PRIVATE=true, for receivers on the same network)" };
  }
  return undefined;
}

/** URL.hostname keeps the brackets of an IPv6 literal. */
function hostOf(url: URL): string {
  return url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
}

/** Resolves a name to all its addresses; tests replace it to play DNS without a network. */
export type Resolver = (hostname: string, options: Pick<LookupOptions, "family" | "hints">) => Promise<LookupAddress[]>;

const systemResolver: Resolver = (hostname, options) =>
  dnsPromises.lookup(hostname, { family: options.family ?? 0, hints: options.hints ?? 0, all: true });

/** Thrown (as the connection error) when a name resolves to a refused address. */
export class BlockedAddressError extends Error {
  readonly code = "ERR_WEBHOOK_ADDRESS_BLOCKED";

  constructor(
    readonly hostname: string,
    readonly address: string,
    reason: string,
  ) {
    super(`webhook host ${hostname} resolved to ${address}: ${reason}`);
    this.name = "BlockedAddressError";
  }
}

/**
 * A `lookup` for http.request, https.request or net.connect that refuses the
 * connection when ANY address of the name is refused, not just the first: a
 * name that mixes a public and a private address is an attack, not a
 * misconfiguration, and refusing it whole keeps Node's address-family
 * fallback (autoSelectFamily) from trying the private one.
 *
 * Node calls lookup only for names: it connects to an IP literal directly, so
 * literals must go through {@link checkWebhookUrl} first ({@link guardWebhookRequest} does both).
 */
export function createGuardedLookup(options: GuardOptions, resolve: Resolver = systemResolver): LookupFunction {
  return (hostname, lookupOptions, callback) => {
    resolve(hostname, { family: lookupOptions.family, hints: lookupOptions.hints }).then(
      (addresses) => {
        for (const entry of addresses) {
          const problem = addressProblem(entry.address, options);
          if (problem !== undefined) {
            callback(new BlockedAddressError(hostname, entry.address, problem), "");
            return;
          }
        }
        const first = addresses[0];
        if (first === undefined) {
          callback(Object.assign(new Error(`${hostname} has no addresses`), { code: "ENOTFOUND" }), "");
        } else if (lookupOptions.all === true) {
          callback(null, addresses);
        } else {
          callback(null, first.address, first.family);
        }
      },
      (error: NodeJS.ErrnoException) => callback(error, ""),
    );
  };
}

/**
 * Connection-time guard for one delivery: the URL checks again (the endpoint
 * may have been saved before the rules or the installation's setting changed,
 * and IP literals never reach lookup), and the lookup that re-checks every
 * address the name resolves to at connection time.
 */
export function guardWebhookRequest(
  url: string,
  options: GuardOptions,
  resolve: Resolver = systemResolver,
): { ok: true; lookup: LookupFunction } | { ok: false; problem: WebhookUrlProblem } {
  const problem = checkWebhookUrl(url, options);
  return problem === undefined ? { ok: true, lookup: createGuardedLookup(options, resolve) } : { ok: false, problem };
}

/**
 * Save-time check: {@link checkWebhookUrl}, then resolve the name and refuse
 * it if any address is refused or if it does not resolve at all (deliveries
 * to it could only fail).
 */
export async function checkWebhookDestination(
  url: string,
  options: GuardOptions,
  resolve: Resolver = systemResolver,
): Promise<WebhookUrlProblem | undefined> {
  const problem = checkWebhookUrl(url, options);
  if (problem !== undefined) return problem;
  const host = hostOf(new URL(url));
  if (parseIp(host) !== null) return undefined;
  let addresses: LookupAddress[];
  try {
    addresses = await resolve(host, {});
  } catch (error) {
    return { code: "unresolvable_host", message: `${host} does not resolve (${(error as NodeJS.ErrnoException).code ?? "error"})` };
  }
  if (addresses.length === 0) return { code: "unresolvable_host", message: `${host} has no addresses` };
  for (const entry of addresses) {
    const refused = addressProblem(entry.address, options);
    if (refused !== undefined) return { code: "blocked_address", message: `${host} resolves to ${entry.address}: ${refused}` };
  }
  return undefined;
}
