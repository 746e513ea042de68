import type { JsonValue } from "@bufbuild/protobuf";
import { parseIp } from "../engine/index.js";
import type { ListKind } from "../policies/index.js";
import type { DecisionEntities } from "../store/history.js";

/** Entity kinds of the fraud graph; each key is `<tag>:<value>`. */
export const ENTITY_TAGS = { user: "u", device: "d", ip: "i", email: "e", card: "c", account: "a" } as const;
export type EntityKind = keyof typeof ENTITY_TAGS;

/** An e-mail as entity keys hold it: compared case-insensitively, surrounding spaces ignored. */
export function emailKey(email: string): string {
  return email.trim().toLowerCase();
}

/**
 * An IP as entity keys hold it: canonical text (RFC 5952 lowercase and
 * compressed, IPv4-mapped IPv6 as IPv4), so notation variants of one address
 * are one entity; text that is not an IP is kept as it came.
 */
export function ipKey(ip: string): string {
  return parseIp(ip)?.text ?? ip;
}

/**
 * The entity value a list kind (user, email, ip, device) takes from a
 * decision's entities, as the request carried it; undefined for a kind that is
 * none of these.
 */
export function entityValueOfKind(entities: DecisionEntities, kind: ListKind): string;
export function entityValueOfKind(entities: DecisionEntities, kind: string): string | undefined;
export function entityValueOfKind(entities: DecisionEntities, kind: string): string | undefined {
  switch (kind) {
    case "user":
      return entities.userId;
    case "email":
      return entities.email;
    case "ip":
      return entities.ip;
    case "device":
      return entities.deviceId;
    default:
      return undefined;
  }
}

/**
 * Metadata keys whose values join the graph as card and bank-account
 * identifiers (docs/feedback.md). Send a fingerprint or token, never a card number.
 */
export const METADATA_IDENTIFIERS = { cardFingerprint: "card", accountNumber: "account" } as const;
const MAX_IDENTIFIER_LENGTH = 256;

/** The card and bank-account identifiers of a request's metadata; absent keys are left out. */
export function metadataIdentifiers(metadata: { [key: string]: JsonValue } | undefined): Pick<DecisionEntities, "cardFingerprint" | "accountNumber"> {
  const found: Pick<DecisionEntities, "cardFingerprint" | "accountNumber"> = {};
  for (const key of Object.keys(METADATA_IDENTIFIERS) as Array<keyof typeof METADATA_IDENTIFIERS>) {
    const value = metadata?.[key];
    const text = typeof value === "string" ? value.trim() : typeof value === "number" ? String(value) : "";
    if (text !== "" && text.length <= MAX_IDENTIFIER_LENGTH) found[key] = text;
  }
  return found;
}

/**
 * The graph keys of a decision's entities, deduplicated. E-mails are compared
 * case-insensitively and IPs in canonical form, so the same entity always has
 * the same key.
 */
export function entityKeys(entities: DecisionEntities): string[] {
  const ip = entities.ip && ipKey(entities.ip);
  const values: Array<[EntityKind, string | undefined]> = [
    ["user", entities.userId],
    ["device", entities.deviceId],
    ["ip", ip],
    ["email", emailKey(entities.email)],
    ["card", entities.cardFingerprint],
    ["account", entities.accountNumber],
  ];
  const keys = new Set<string>();
  for (const [kind, value] of values) if (value) keys.add(`${ENTITY_TAGS[kind]}:${value}`);
  return [...keys];
}

/** The entities of a stored decision, read back from its request (protobuf JSON, IP as resolved). */
export function entitiesOfRequest(request: JsonValue): DecisionEntities {
  const fields = (typeof request === "object" && request !== null && !Array.isArray(request) ? request : {}) as { [key: string]: JsonValue };
  const text = (value: JsonValue | undefined): string => (typeof value === "string" ? value : "");
  const metadata = fields.metadata;
  return {
    userId: text(fields.userId),
    ip: text(fields.ip),
    deviceId: text(fields.deviceId),
    email: text(fields.email),
    ...metadataIdentifiers(typeof metadata === "object" && metadata !== null && !Array.isArray(metadata) ? metadata : undefined),
  };
}
