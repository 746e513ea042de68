import { generateKeyPairSync } from "node:crypto";
import { AuditLog } from "../../src/audit/log.js";
import type { AuditStore } from "../../src/audit/log.js";
import { entryHash } from "../../src/audit/entry.js";
import type { AuditFields, AuditRecord } from "../../src/audit/entry.js";
import { AuditSigner } from "../../src/audit/signer.js";
import { ManualClock } from "../helpers/clock.js";

export function ephemeralSigner(): AuditSigner {
  return new AuditSigner(generateKeyPairSync("ed25519").privateKey);
}

/** A realistic mix: decisions and administrative changes, scoped and installation-wide. */
export function sampleFields(count: number): AuditFields[] {
  const fields: AuditFields[] = [];
  for (let i = 1; i <= count; i++) {
    if (i % 3 === 0) {
      fields.push({ actor: "cli", action: "key.rotated", subject: `key_${i}`, data: { graceHours: 24 } });
    } else if (i % 3 === 1) {
      fields.push({
        accountId: "acct_1",
        environment: "live",
        actor: "key_abc",
        action: "decision.made",
        subject: `dec_${i}`,
        data: { decision: "deny", score: 70 + i, reasons: ["TOR_EXIT"], amount: 12.5 },
      });
    } else {
      fields.push({ accountId: "acct_1", actor: "system", action: "case.created", subject: `case_${i}`, data: {} });
    }
  }
  return fields;
}

/** Appends `count` entries a second apart. */
export function fillLog(store: AuditStore, signer: AuditSigner, count: number): void {
  const clock = new ManualClock();
  const log = new AuditLog(store, signer, clock);
  for (const fields of sampleFields(count)) {
    log.record(fields);
    clock.advance(1000);
  }
}

/** What someone without the private key can do: change the body and recompute the hash consistently. */
export function rehashed(record: AuditRecord, body: string): AuditRecord {
  return { ...record, body, hash: entryHash(record.prevHash, body) };
}
