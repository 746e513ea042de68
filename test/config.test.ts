import { describe, expect, it } from "vitest";
import { loadConfig } from "../src/config.js";

describe("loadConfig", () => {
  it("takes integers in decimal digits only: a hexadecimal, exponent or padded value is a typo, not a port", () => {
    expect(loadConfig({ PORT: "8080" }).port).toBe(8080);
    expect(loadConfig({ PORT: "" }).port).toBe(8080);
    for (const value of ["0x50", "1e3", " 19402", "19402 ", "0b1", "+80", "-1", "80.5", "abc", "70000"]) {
      expect(() => loadConfig({ PORT: value }), value).toThrow(`PORT must be a decimal integer from 0 to 65535, got "${value}"`);
    }
    expect(() => loadConfig({ FRAUD_MAX_BODY_BYTES: "1e6" })).toThrow(/FRAUD_MAX_BODY_BYTES must be a decimal integer from 1024 to 4294967295/);
    expect(loadConfig({ FRAUD_MAX_BODY_BYTES: "1000000" }).maxBodyBytes).toBe(1_000_000);
  });

  it("refuses a body limit the protocol libraries cannot take, instead of failing later with an [internal] error", () => {
    expect(loadConfig({ FRAUD_MAX_BODY_BYTES: "4294967295" }).maxBodyBytes).toBe(4_294_967_295);
    expect(() => loadConfig({ FRAUD_MAX_BODY_BYTES: "4294967296" })).toThrow('FRAUD_MAX_BODY_BYTES must be a decimal integer from 1024 to 4294967295, got "4294967296"');
  });
});
