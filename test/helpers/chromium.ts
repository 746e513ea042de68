import fs from "node:fs";
import { chromium, type Browser } from "playwright-core";

/** Debian's Chromium, which `.ci/run` installs; never a browser a test tool downloads. */
export const CHROMIUM_PATH = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";

/**
 * Whether the browser tests can run here. Without Chromium they are skipped,
 * unless FRAUD_REQUIRE_BROWSER=1 (set by `.ci/run`, which installs it), where
 * a missing browser must fail rather than pass in silence.
 */
export function chromiumAvailable(): boolean {
  if (fs.existsSync(CHROMIUM_PATH)) return true;
  if (process.env.FRAUD_REQUIRE_BROWSER === "1") throw new Error(`FRAUD_REQUIRE_BROWSER=1 but there is no Chromium at ${CHROMIUM_PATH}`);
  return false;
}

/**
 * Headless Chromium in a new empty profile (playwright makes one per launch),
 * with what keeps it from reaching for the network on its own (this machine's
 * network is closed, and a test must not depend on it).
 */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM_PATH,
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}
