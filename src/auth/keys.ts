import { hash, timingSafeEqual } from "node:crypto";
import { randomBase62 } from "../ids.js";

export type Environment = "test" | "live";
export type KeyKind = "publishable" | "secret";

/** Every permission a key can hold. Secret keys hold all of them unless restricted. */
export const ALL_PERMISSIONS = [
  "decisions:write",
  "decisions:read",
  "evidence:read",
  "feedback:write",
  "cases:read",
  "cases:write",
  "policies:read",
  "policies:write",
  "lists:read",
  "lists:write",
  "webhooks:read",
  "webhooks:write",
  "settings:read",
  "settings:write",
  "audit:read",
  "dead_letters:read",
  "dead_letters:write",
  "status:read",
  "consortium:write",
] as const;

export type Permission = (typeof ALL_PERMISSIONS)[number];

/** Publishable keys live in browsers and apps: they may only ask for decisions. */
export const PUBLISHABLE_PERMISSIONS: readonly Permission[] = ["decisions:write"];

/** What a key may do, as shown to people (CLI, audit log): its own list, else its kind's ("all" for a secret key). */
export function shownPermissions(kind: KeyKind, permissions: readonly Permission[] | undefined): Permission[] | "all" {
  const own = permissions ?? (kind === "publishable" ? PUBLISHABLE_PERMISSIONS : undefined);
  return own === undefined ? "all" : [...own];
}

export function isPermission(value: string): value is Permission {
  return (ALL_PERMISSIONS as readonly string[]).includes(value);
}

const KEY_PREFIX: Record<KeyKind, string> = { publishable: "pk", secret: "sk" };

/** 32 base62 characters carry ~190 bits, above the 24 random bytes asked for. */
const KEY_RANDOM_LENGTH = 32;

const KEY_FORMAT = /^(pk|sk)_(test|live)_[0-9A-Za-z]{32,128}$/;

export function generateKey(kind: KeyKind, environment: Environment): string {
  return `${KEY_PREFIX[kind]}_${environment}_${randomBase62(KEY_RANDOM_LENGTH)}`;
}

export interface KeyShape {
  kind: KeyKind;
  environment: Environment;
}

/** Reads kind and environment from a key's prefix; undefined when it is not a key at all. */
export function parseKeyShape(key: string): KeyShape | undefined {
  const match = KEY_FORMAT.exec(key);
  if (!match) return undefined;
  return {
    kind: match[1] === "pk" ? "publishable" : "secret",
    environment: match[2] as Environment,
  };
}

/** SHA-256 of the whole key: what the database stores instead of the key. */
export function hashKey(key: string): Buffer {
  return hash("sha256", key, "buffer");
}

/** Constant-time comparison of a stored hex hash with a computed one. */
export function hashesMatch(storedHex: string, computed: Buffer): boolean {
  const stored = Buffer.from(storedHex, "hex");
  return stored.length === computed.length && timingSafeEqual(stored, computed);
}

/** How long a rotated key keeps working (part 3.3 of the specification). */
export const ROTATION_GRACE_MS = 24 * 60 * 60 * 1000;
