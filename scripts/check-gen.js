#!/usr/bin/env node
// Fails when gen/ is not exactly what `buf generate` makes from proto/ today:
// generates into a temporary directory and compares file by file.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "fraud-gen-"));
try {
  execFileSync("npx", ["buf", "generate", "--output", scratch], { stdio: ["ignore", "ignore", "inherit"] });
  const list = (root) =>
    fs.existsSync(root)
      ? fs.readdirSync(root, { recursive: true }).filter((f) => fs.statSync(path.join(root, f)).isFile()).sort()
      : [];
  const expected = list(path.join(scratch, "gen"));
  const actual = list("gen");
  const problems = [];
  for (const file of new Set([...expected, ...actual])) {
    const want = path.join(scratch, "gen", file);
    const have = path.join("gen", file);
    if (!fs.existsSync(have)) problems.push(`missing: gen/${file}`);
    else if (!fs.existsSync(want)) problems.push(`not generated from proto/: gen/${file}`);
    else if (!fs.readFileSync(want).equals(fs.readFileSync(have))) problems.push(`stale: gen/${file}`);
  }
  if (problems.length > 0) {
    console.error(`gen/ is out of date with proto/ — run \`npm run generate\` and commit:\n  ${problems.join("\n  ")}`);
    process.exit(1);
  }
  console.log(`gen/ is fresh (${actual.length} files)`);
} finally {
  fs.rmSync(scratch, { recursive: true, force: true });
}
