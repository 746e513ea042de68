import type { JsonValue } from "@bufbuild/protobuf";
import { canonicalEmail, canonicalMailbox, publicClientNetwork } from "../engine/index.js";
import type { ListKind } from "../policies/index.js";
import type { DecisionEntities } from "../store/history.js";

/** Entity kinds of the fraud graph; each key is `<tag>:<value>`. */
const ENTITY_TAGS = { user: "u", device: "d", ip: "i", email: "e", card: "c", account: "a" } as const;
export type EntityKind = keyof typeof ENTITY_TAGS;

/** Whether a graph key is an IP address's: shared by everyone behind it, so the graph's second hop skips it. */
export function isIpEntityKey(key: string): boolean {
  return key.startsWith(`${ENTITY_TAGS.ip}:`);
}
/** A decision's entity keys by kind, "" for an entity it did not carry. */
export type EntityKeys = Record<EntityKind, string>;

/** The entity value a list kind (user, email, ip, device) takes from a decision's entities, as the request carried it. */
export function entityValueOfKind(entities: DecisionEntities, kind: ListKind): string {
  switch (kind) {
    case "user":
      return entities.userId;
    case "email":
      return entities.email;
    case "ip":
      return entities.ip;
    case "device":
      return entities.deviceId;
  }
}

/**
 * Metadata keys whose values join the graph as card and bank-account
 * identifiers (docs/feedback.md). Send a fingerprint or token, never a card number.
 */
const METADATA_IDENTIFIERS = ["cardFingerprint", "accountNumber"] as const;
const MAX_IDENTIFIER_LENGTH = 256;

/** The card and bank-account identifiers of a request's metadata; absent keys are left out. */
export function metadataIdentifiers(metadata: { [key: string]: JsonValue } | undefined): Pick<DecisionEntities, "cardFingerprint" | "accountNumber"> {
  const found: Pick<DecisionEntities, "cardFingerprint" | "accountNumber"> = {};
  for (const key of METADATA_IDENTIFIERS) {
    const value = metadata?.[key];
    const text = typeof value === "string" ? value.trim() : typeof value === "number" ? String(value) : "";
    if (text !== "" && text.length <= MAX_IDENTIFIER_LENGTH) found[key] = text;
  }
  return found;
}

/**
 * An e-mail as an entity: the mailbox it delivers to ({@link canonicalMailbox}), so that the `+tag` and Gmail
 * dot spellings of one inbox, which a person makes up at will (one per signup), are one entity. A value that is
 * no address (nothing before or after the `@`) names no mailbox; it is its own entity, in canonical form.
 */
export function emailEntity(email: string): string {
  return canonicalMailbox(email) || canonicalEmail(email);
}

/**
 * The key of each of a decision's entities, "" for one it did not carry. Keys
 * carry a type tag, so a user id can never collide with an e-mail or IP;
 * e-mails are compared as their mailbox ({@link emailEntity}) and
 * IPs as the network a client holds (an IPv4 address, an IPv6 address's /64,
 * in canonical form), so the same entity always has the same key. An IP that
 * is not public is no entity at all ({@link publicClientNetwork}). The fraud
 * graph and the history's velocity counters both key entities this way.
 */
export function entityKeysByKind(entities: DecisionEntities): EntityKeys {
  const key = (kind: EntityKind, value: string | undefined) => (value ? `${ENTITY_TAGS[kind]}:${value}` : "");
  return {
    user: key("user", entities.userId),
    device: key("device", entities.deviceId),
    ip: key("ip", publicClientNetwork(entities.ip)),
    email: key("email", emailEntity(entities.email)),
    card: key("card", entities.cardFingerprint),
    account: key("account", entities.accountNumber),
  };
}

/** The graph keys of a decision's entities, deduplicated. */
export function entityKeys(entities: DecisionEntities): string[] {
  return graphKeysOf(entityKeysByKind(entities));
}

/** The distinct keys a decision has, for the graph; for a thread that already holds them by kind. */
export function graphKeysOf(keys: EntityKeys): string[] {
  return [...new Set(Object.values(keys).filter((key) => key !== ""))];
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
