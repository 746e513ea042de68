import { createPublicKey, generateKeyPairSync } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  AUDIT_KEY_FILE,
  AuditSigner,
  importPublicKeyPem,
  publicKeyFingerprint,
  verifyHashSignature,
} from "../../src/audit/signer.js";
import { entryHash, GENESIS_HASH } from "../../src/audit/entry.js";

let dir: string;

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "audit-signer-"));
});

afterEach(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

describe("AuditSigner", () => {
  it("creates the installation key once, private to its owner, and loads the same key afterwards", () => {
    const dataDir = path.join(dir, "data");
    const first = AuditSigner.loadOrCreate(dataDir);
    const file = path.join(dataDir, AUDIT_KEY_FILE);
    expect(fs.readFileSync(file, "utf8")).toMatch(/^-----BEGIN PRIVATE KEY-----/);
    if (process.platform !== "win32") expect(fs.statSync(file).mode & 0o777).toBe(0o600);
    expect(fs.readdirSync(dataDir)).toEqual([AUDIT_KEY_FILE]);

    const second = AuditSigner.loadOrCreate(dataDir);
    expect(second.exportPublicKeyPem()).toBe(first.exportPublicKeyPem());
    expect(publicKeyFingerprint(second.publicKey)).toMatch(/^[0-9a-f]{16}$/);
  });

  it("creates the key over a temporary file an earlier process of the same pid left (killed before unlinking it)", () => {
    const stale = path.join(dir, `${AUDIT_KEY_FILE}.${process.pid}.tmp`);
    fs.writeFileSync(stale, "half a key", { mode: 0o600 });
    const signer = AuditSigner.loadOrCreate(dir);
    const stored = createPublicKey(fs.readFileSync(path.join(dir, AUDIT_KEY_FILE), "utf8"));
    expect(stored.export({ type: "spki", format: "pem" })).toBe(signer.exportPublicKeyPem());
    expect(fs.readdirSync(dir)).toEqual([AUDIT_KEY_FILE]);
  });

  it("signs hashes that verify with the exported public key only", () => {
    const signer = AuditSigner.loadOrCreate(dir);
    const other = AuditSigner.loadOrCreate(path.join(dir, "other"));
    const hash = entryHash(GENESIS_HASH, '{"hello":"world"}');
    const signature = signer.sign(hash);
    const exported = importPublicKeyPem(signer.exportPublicKeyPem());
    expect(exported.export({ format: "jwk" })).toEqual(signer.publicKey.export({ format: "jwk" }));

    expect(verifyHashSignature(exported, hash, signature)).toBe(true);
    expect(verifyHashSignature(other.publicKey, hash, signature)).toBe(false);
    expect(verifyHashSignature(exported, entryHash(GENESIS_HASH, "{}"), signature)).toBe(false);
    expect(verifyHashSignature(exported, hash, "zz")).toBe(false);
    expect(verifyHashSignature(exported, hash.toUpperCase(), signature)).toBe(false);
  });

  it.skipIf(process.platform === "win32")("refuses a key file other users can read", () => {
    AuditSigner.loadOrCreate(dir);
    fs.chmodSync(path.join(dir, AUDIT_KEY_FILE), 0o644);
    expect(() => AuditSigner.loadOrCreate(dir)).toThrow(/chmod 600/);
  });

  it("refuses a public key that is not Ed25519", () => {
    const { publicKey } = generateKeyPairSync("x25519");
    const pem = publicKey.export({ type: "spki", format: "pem" }).toString();
    expect(() => importPublicKeyPem(pem)).toThrow(/must be Ed25519/);
    expect(() => new AuditSigner(generateKeyPairSync("x25519").privateKey)).toThrow(/Ed25519 private key/);
  });
});
