import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify } from "node:crypto";
import type { KeyObject } from "node:crypto";
import fs from "node:fs";
import path from "node:path";

/** Where the installation's audit key lives inside the data directory. */
export const AUDIT_KEY_FILE = "audit-ed25519.pem";

/** The data directory's audit log has entries but its signing key is gone. */
export class MissingAuditKeyError extends Error {}

/**
 * Signs audit entry hashes with the installation's Ed25519 key.
 *
 * Only the private key is stored (PKCS#8 PEM, mode 0600): the public key is
 * derived from it, so the two can never disagree. Whoever verifies a copy of
 * the log needs only the exported public key, never the data directory.
 */
export class AuditSigner {
  readonly publicKey: KeyObject;

  constructor(private readonly privateKey: KeyObject) {
    if (privateKey.asymmetricKeyType !== "ed25519" || privateKey.type !== "private") {
      throw new TypeError("the audit signer needs an Ed25519 private key");
    }
    this.publicKey = createPublicKey(privateKey);
  }

  /**
   * Loads `<dataDir>/audit-ed25519.pem`, creating it on first use.
   *
   * Creation writes a temporary file and hard-links it into place: link fails
   * when the name exists, so two processes starting at once (the server and
   * fraudctl) end up sharing whichever key landed first, and a reader never
   * sees a half-written file.
   */
  static loadOrCreate(dataDir: string): AuditSigner {
    const file = path.join(dataDir, AUDIT_KEY_FILE);
    if (!fs.existsSync(file)) {
      fs.mkdirSync(dataDir, { recursive: true });
      const { privateKey } = generateKeyPairSync("ed25519");
      const pem = privateKey.export({ type: "pkcs8", format: "pem" });
      const temporary = `${file}.${process.pid}.tmp`;
      writeDurably(temporary, pem);
      try {
        fs.linkSync(temporary, file);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      } finally {
        fs.unlinkSync(temporary);
      }
      // The key's name on disk before the first entry it signs is: after a power loss, a log whose key is
      // gone can no longer be verified, nor continued.
      syncDirectory(dataDir);
    }
    return AuditSigner.load(dataDir);
  }

  /**
   * Loads `<dataDir>/audit-ed25519.pem`, which must exist: where the log
   * already has entries, a new key would sign the next ones with a key their
   * verifiers do not know, and the log would no longer verify as one.
   */
  static load(dataDir: string): AuditSigner {
    const file = path.join(dataDir, AUDIT_KEY_FILE);
    if (!fs.existsSync(file)) throw new MissingAuditKeyError(`no audit signing key at ${file}, though the audit log has entries: restore the file from its backup`);
    assertPrivateFile(file);
    return new AuditSigner(createPrivateKey(fs.readFileSync(file)));
  }

  /** The key of a data directory: created when its audit log is still empty, else loaded (and required). */
  static forLog(dataDir: string, logIsEmpty: boolean): AuditSigner {
    return logIsEmpty ? AuditSigner.loadOrCreate(dataDir) : AuditSigner.load(dataDir);
  }

  /** Ed25519 signature of a hex SHA-256 entry hash (over its 32 raw bytes), hex. */
  sign(hashHex: string): string {
    return sign(null, Buffer.from(hashHex, "hex"), this.privateKey).toString("hex");
  }

  /** The public key as SPKI PEM, for `fraudctl audit export-key` and offline verification. */
  exportPublicKeyPem(): string {
    return exportPublicKeyPem(this.publicKey);
  }
}

function exportPublicKeyPem(publicKey: KeyObject): string {
  return publicKey.export({ type: "spki", format: "pem" }).toString();
}

/** Reads a public key exported by {@link AuditSigner.exportPublicKeyPem}. */
export function importPublicKeyPem(pem: string): KeyObject {
  const key = createPublicKey(pem);
  if (key.asymmetricKeyType !== "ed25519") throw new TypeError("the audit public key must be Ed25519");
  return key;
}

/** Short stable name of a public key (SHA-256 of its SPKI DER, first 16 hex digits), for humans comparing keys. */
export function publicKeyFingerprint(publicKey: KeyObject): string {
  return createHash("sha256").update(publicKey.export({ type: "spki", format: "der" })).digest("hex").slice(0, 16);
}

/** True when `signatureHex` is the key's Ed25519 signature of the hash; false for anything malformed. */
export function verifyHashSignature(publicKey: KeyObject, hashHex: string, signatureHex: string): boolean {
  if (!/^[0-9a-f]{64}$/.test(hashHex) || !/^[0-9a-f]{128}$/.test(signatureHex)) return false;
  return verify(null, Buffer.from(hashHex, "hex"), publicKey, Buffer.from(signatureHex, "hex"));
}

/**
 * Refuses a key file that other users can read, as ssh does: an audit log is
 * only as trustworthy as the secrecy of the key that signs it. Windows has no
 * POSIX mode bits to check.
 */
function assertPrivateFile(file: string): void {
  if (process.platform === "win32") return;
  const mode = fs.statSync(file).mode & 0o777;
  if ((mode & 0o077) !== 0) {
    throw new Error(`${file} is readable by other users (mode ${mode.toString(8)}); run chmod 600 on it`);
  }
}

/**
 * Writes a file for its owner only, on disk (fsync) before it returns. One a process of the same pid left
 * (killed, or a power loss, between writing and unlinking it: containers reuse pids) is written over.
 */
function writeDurably(file: string, content: string | Uint8Array): void {
  const fd = fs.openSync(file, "w", 0o600);
  try {
    fs.writeFileSync(fd, content);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

function syncDirectory(dir: string): void {
  const fd = fs.openSync(dir, "r");
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}
