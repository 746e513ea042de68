import { describe, expect, it } from "vitest";
import { Metrics, type RequestObservation } from "../src/observability/metrics.js";

const call = (durationMs: number): RequestObservation => ({
  route: "POST /api/v1/decide",
  protocol: "http",
  code: "OK",
  serverError: false,
  clientError: false,
  durationMs,
  component: "API Node",
  inStatusReport: true,
});

describe("the status report's latency percentiles", () => {
  it("are nearest-rank: of two calls the median is the faster, and p99 of 100 calls is the 99th", () => {
    const two = new Metrics();
    two.observe(call(194));
    two.observe(call(10));
    expect(two.component("API Node")).toMatchObject({ latencyP50Ms: 10, latencyP99Ms: 194 });

    const hundred = new Metrics();
    for (let ms = 100; ms >= 1; ms--) hundred.observe(call(ms));
    expect(hundred.component("API Node")).toMatchObject({ latencyP50Ms: 50, latencyP99Ms: 99, requests: 100 });

    const one = new Metrics();
    one.observe(call(7));
    expect(one.component("API Edge")).toMatchObject({ latencyP50Ms: 7, latencyP99Ms: 7 });
    expect(new Metrics().component("API Edge")).toMatchObject({ latencyP50Ms: 0, latencyP99Ms: 0 });
  });
});
