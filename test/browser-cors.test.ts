// A web page on another origin calls the service from real Chromium (Debian's, driven by playwright-core):
// decide and analyze with a publishable key over REST and Connect JSON, the public status without a key;
// a secret-key operation is refused by the browser itself.
import http from "node:http";
import type { AddressInfo } from "node:net";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chromiumAvailable, launchChromium } from "./helpers/chromium.js";
import { startTestServer, type TestServer } from "./helpers/server.js";

const enabled = chromiumAvailable();

/** What a page's fetch came back with: an answer the page may read, or the browser's refusal. */
type PageFetch = { status: number; body: unknown; requestId: string | null; rateLimit: string | null } | { blocked: string };

describe.skipIf(!enabled)("a web page on another origin, in Chromium", () => {
  let server: TestServer;
  let site: http.Server;
  let siteUrl: string;
  let browser: Browser;
  let page: Page;
  let keys: ReturnType<TestServer["createAccount"]>["keys"];

  beforeAll(async () => {
    server = await startTestServer();
    keys = server.createAccount("Shop").keys;
    // The merchant's site: another port is another origin.
    site = http.createServer((_req, res) => {
      res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
      res.end("<!doctype html><title>shop</title><p>checkout</p>");
    });
    await new Promise<void>((resolve) => site.listen(0, "127.0.0.1", resolve));
    siteUrl = `http://127.0.0.1:${(site.address() as AddressInfo).port}/`;
    browser = await launchChromium();
    page = await browser.newPage();
    await page.goto(siteUrl);
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await new Promise<void>((resolve) => (site ? site.close(() => resolve()) : resolve()));
    await server?.close();
  });

  /** Runs fetch in the page, as the merchant's own script would. */
  function pageFetch(path: string, init: { method?: string; headers?: Record<string, string>; body?: unknown }): Promise<PageFetch> {
    return page.evaluate(
      async ({ url, method, headers, body }) => {
        try {
          const res = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
          return { status: res.status, body: await res.json(), requestId: res.headers.get("x-request-id"), rateLimit: res.headers.get("ratelimit") };
        } catch (error) {
          return { blocked: String(error) };
        }
      },
      { url: `${server.url}${path}`, method: init.method ?? "GET", headers: init.headers ?? {}, body: init.body },
    );
  }

  it("decides over REST with a publishable key, and reads the answer's headers", async () => {
    const answer = await pageFetch("/api/v1/decide", {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": keys.test.publishable },
      body: { userId: "shopper_1", action: "checkout", amount: 42, currency: "EUR", ip: "81.2.69.160" },
    });
    expect(answer).toMatchObject({ status: 200, body: { success: true, data: { decision: expect.stringMatching(/^(allow|challenge|deny)$/) } } });
    if ("blocked" in answer) return;
    expect(answer.requestId).toMatch(/^req_/);
    expect(answer.rateLimit).toMatch(/^"decide";r=\d+;t=\d+$/);
  });

  it("analyzes over Connect JSON, the protocol of web clients", async () => {
    const answer = await pageFetch("/fraud.v1.DecisionService/Analyze", {
      method: "POST",
      headers: { "content-type": "application/json", "connect-protocol-version": "1", "x-api-key": keys.test.publishable },
      body: { userId: "shopper_2", action: "login", userAgent: "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0.0.0 Safari/537.36" },
    });
    expect(answer).toMatchObject({ status: 200, body: { visitorId: expect.stringMatching(/^vis_/), riskLevel: expect.any(String) } });
  });

  it("reads the service's errors, and the public status without a key", async () => {
    const refused = await pageFetch("/api/v1/decide", {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": "pk_test_notAKeyAtAll000000000000000" },
      body: { userId: "shopper_3", action: "login" },
    });
    expect(refused).toMatchObject({ status: 401, body: { success: false, error: { code: "UNAUTHORIZED" } } });
    const status = await pageFetch("/api/v1/status?public=true", {});
    expect(status).toMatchObject({ status: 200, body: { success: true, data: { status: "operational" } } });
  });

  it("cannot call an operation that needs a secret key: the browser refuses the cross-origin call", async () => {
    for (const [path, init] of [
      ["/api/v1/cases", { headers: { "x-api-key": keys.test.secret } }],
      ["/api/v1/feedback", { method: "POST", headers: { "content-type": "application/json", "x-api-key": keys.test.secret }, body: { userId: "shopper_1", actualOutcome: "fraud" } }],
      ["/fraud.v1.CaseService/ListCases", { method: "POST", headers: { "content-type": "application/json", "connect-protocol-version": "1", "x-api-key": keys.test.secret }, body: {} }],
    ] as const) {
      expect(await pageFetch(path, init), path).toEqual({ blocked: expect.stringMatching(/Failed to fetch/) });
    }
    // Nothing reached the feedback handler: its preflight was refused.
    expect(server.app.db.prepare("SELECT COUNT(*) AS n FROM feedback").get()).toEqual({ n: 0 });
  });

  it("is refused a secret key even where a page may call: decide, analyze and the status, on every protocol", async () => {
    const decisionsBefore = server.app.db.prepare("SELECT COUNT(*) AS n FROM decisions").get();
    for (const [path, init] of [
      ["/api/v1/decide", { method: "POST", headers: { "content-type": "application/json", "x-api-key": keys.test.secret }, body: { userId: "shopper_4", action: "login" } }],
      ["/fraud.v1.DecisionService/Decide", { method: "POST", headers: { "content-type": "application/json", "connect-protocol-version": "1", "x-api-key": keys.test.secret }, body: { userId: "shopper_4", action: "login" } }],
      ["/api/v1/status", { headers: { authorization: `Bearer ${keys.test.secret}` } }],
    ] as const) {
      const answer = await pageFetch(path, init);
      expect(answer, path).toMatchObject({ status: 403 });
      expect(JSON.stringify(answer), path).toMatch(/a secret key belongs on a server: this request comes from a web page/);
    }
    // The refused decide decided nothing.
    expect(server.app.db.prepare("SELECT COUNT(*) AS n FROM decisions").get()).toEqual(decisionsBefore);
  });
});
