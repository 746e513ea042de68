import fs from "node:fs";
import os from "node:os";
import path from "node:path";

/** The temp dirs made in this test file, removed after it by test/setup.ts. */
const madeTempDirs = new Set<string>();

export function tempDir(prefix = "fraud-test-"): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  madeTempDirs.add(dir);
  return dir;
}

/** Removes every temp dir {@link tempDir} made, whether or not its test got as far as removing it. */
export function removeTempDirs(): void {
  for (const dir of madeTempDirs) fs.rmSync(dir, { recursive: true, force: true, maxRetries: 5 });
  madeTempDirs.clear();
}
