import dns from "node:dns";
import http from "node:http";
import type { AddressInfo } from "node:net";
import type { LookupAddress } from "node:dns";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import {
  addressProblem,
  BlockedAddressError,
  checkWebhookDestination,
  checkWebhookUrl,
  createGuardedLookup,
} from "../../src/webhooks/address-guard.js";
import { guardedPost } from "../../src/webhooks/http-delivery.js";
import type { Resolver } from "../../src/webhooks/address-guard.js";

const strict = { allowPrivate: false };
const relaxed = { allowPrivate: true };

/** A resolver that answers from a table, so DNS tricks can be played without a network. */
function fakeDns(table: Record<string, string[]>): Resolver {
  return async (hostname) => {
    const addresses = table[hostname];
    if (addresses === undefined) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: "ENOTFOUND" });
    return addresses.map((address): LookupAddress => ({ address, family: address.includes(":") ? 6 : 4 }));
  };
}

describe("addressProblem", () => {
  it.each([
    "127.0.0.1",
    "127.255.255.254",
    "10.1.2.3",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.0.10",
    "100.64.0.1",
    "169.254.169.254",
    "::1",
    "fc00::1",
    "fd12:3456::1",
    "fe80::1",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "::ffff:169.254.169.254",
    "64:ff9b::a9fe:a9fe",
    "2002:7f00:1::1",
  ])("refuses the private address %s unless private addresses are allowed", (address) => {
    expect(addressProblem(address, strict)).toMatch(/FRAUD_WEBHOOK_ALLOW_PRIVATE=true/);
    expect(addressProblem(address, relaxed)).toBeUndefined();
  });

  it.each([
    "0.0.0.0",
    "0.1.2.3",
    "::",
    "224.0.0.1",
    "239.255.255.250",
    "ff02::1",
    "255.255.255.255",
    "240.0.0.1",
    "192.0.2.1",
    "2001:db8::1",
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",
    "::7f00:1",
    "64:ff9b::e000:1",
  ])("always refuses the special address %s", (address) => {
    expect(addressProblem(address, strict)).toMatch(/never a webhook destination/);
    expect(addressProblem(address, relaxed)).toMatch(/never a webhook destination/);
  });

  it.each(["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"])(
    "allows the public address %s",
    (address) => {
      expect(addressProblem(address, strict)).toBeUndefined();
    },
  );

  it("names the range in its explanation", () => {
    expect(addressProblem("169.254.169.254", strict)).toBe(
      "169.254.169.254 is a link-local address (set FRAUD_WEBHOOK_ALLOW_PRIVATE=true to allow it)",
    );
    expect(addressProblem("::ffff:10.0.0.1", strict)).toMatch(/^10\.0\.0\.1 is a private \(RFC 1918\) address/);
    expect(addressProblem("nonsense", strict)).toBe("nonsense is not an IP address");
    expect(addressProblem("::", strict)).toBe(":: is the unspecified address, never a webhook destination");
  });
});

describe("checkWebhookUrl", () => {
  it("accepts public https URLs", () => {
    expect(checkWebhookUrl("https://hooks.example.com/fraud?x=1", strict)).toBeUndefined();
    expect(checkWebhookUrl("https://93.184.216.34:8443/hook", strict)).toBeUndefined();
    expect(checkWebhookUrl("https://[2606:4700:4700::1111]/hook", strict)).toBeUndefined();
  });

  it("wants https, and takes plain http only when the installation allows private destinations", () => {
    expect(checkWebhookUrl("http://hooks.example.com/fraud", strict)).toMatchObject({ code: "insecure_scheme", message: expect.stringMatching(/must use https/) });
    expect(checkWebhookUrl("http://93.184.216.34/hook", strict)?.code).toBe("insecure_scheme");
    expect(checkWebhookUrl("http://hooks.example.com/fraud", relaxed)).toBeUndefined();
  });

  it.each([
    ["not a url", "invalid_url"],
    ["/relative/path", "invalid_url"],
    ["ftp://example.com/", "unsupported_scheme"],
    ["file:///etc/passwd", "unsupported_scheme"],
    ["gopher://example.com/", "unsupported_scheme"],
    ["https://user:pass@example.com/", "credentials_in_url"],
    ["https://token@example.com/", "credentials_in_url"],
    ["https://1.1.1.1:0/", "invalid_url"],
    ["https://hooks.example.com:00/fraud", "invalid_url"],
    ["http://localhost:8080/", "blocked_hostname"],
    ["http://LOCALHOST./", "blocked_hostname"],
    ["http://api.localhost/", "blocked_hostname"],
    ["http://127.0.0.1/", "blocked_address"],
    ["http://[::1]/", "blocked_address"],
    ["http://[::ffff:127.0.0.1]/", "blocked_address"],
    ["http://0x7f.1/", "blocked_address"],
    ["http://2130706433/", "blocked_address"],
    ["http://0177.0.0.1/", "blocked_address"],
    ["http://0/", "blocked_address"],
    ["http://169.254.169.254/latest/meta-data/", "blocked_address"],
    ["http://[fd00::1]/", "blocked_address"],
    // What the URL parser would drop, so that the URL listed would not be the one delivered to.
    ["https://8.8.8.8/a\r\nb", "invalid_url"],
    ["https://8.8.8.8/a\tb", "invalid_url"],
    [" https://8.8.8.8/", "invalid_url"],
    ["https://8.8.8.8/ ", "invalid_url"],
    // A 6to4 address is the site behind the IPv4 address it embeds; NAT64's, the IPv4 address itself.
    ["http://[2002:a00:1::1]/", "blocked_address"],
    ["http://[64:ff9b::7f00:1]/", "blocked_address"],
  ])("refuses %s (%s)", (url, code) => {
    expect(checkWebhookUrl(url, strict)?.code).toBe(code);
  });

  it("lets private destinations through when the installation allows them, but never special ones", () => {
    expect(checkWebhookUrl("http://localhost:8080/", relaxed)).toBeUndefined();
    expect(checkWebhookUrl("http://10.0.0.5/hook", relaxed)).toBeUndefined();
    expect(checkWebhookUrl("http://0.0.0.0/", relaxed)?.code).toBe("blocked_address");
    expect(checkWebhookUrl("https://u:p@10.0.0.5/", relaxed)?.code).toBe("credentials_in_url");
  });
});

describe("checkWebhookDestination (save time)", () => {
  const dns = fakeDns({
    "hooks.example.com": ["93.184.216.34", "2606:2800:220:1::1"],
    "internal.example.com": ["10.0.0.7"],
    "mixed.example.com": ["93.184.216.34", "127.0.0.1"],
    "empty.example.com": [],
  });

  it("resolves the name and refuses it when any address is refused", async () => {
    expect(await checkWebhookDestination("https://hooks.example.com/x", strict, dns)).toBeUndefined();
    expect(await checkWebhookDestination("https://internal.example.com/x", strict, dns)).toMatchObject({
      code: "blocked_address",
      message: expect.stringMatching(/^internal\.example\.com resolves to 10\.0\.0\.7: /) as unknown,
    });
    expect((await checkWebhookDestination("https://mixed.example.com/x", strict, dns))?.code).toBe("blocked_address");
    expect(await checkWebhookDestination("https://internal.example.com/x", relaxed, dns)).toBeUndefined();
  });

  it("refuses names that do not resolve, and checks literals without DNS", async () => {
    expect((await checkWebhookDestination("https://nowhere.example.com/", strict, dns))?.code).toBe("unresolvable_host");
    expect((await checkWebhookDestination("https://empty.example.com/", strict, dns))?.code).toBe("unresolvable_host");
    expect(await checkWebhookDestination("https://93.184.216.34/", strict, dns)).toBeUndefined();
    expect((await checkWebhookDestination("http://localhost/", strict, dns))?.code).toBe("blocked_hostname");
  });
});

describe("guarded lookup", () => {
  function lookupWith(resolver: Resolver, all: boolean, options = strict) {
    return new Promise<{ error: NodeJS.ErrnoException | null; address: unknown; family: number | undefined }>((resolve) => {
      createGuardedLookup(options, resolver)("rebind.example.com", { all }, (error, address, family) =>
        resolve({ error, address, family }),
      );
    });
  }

  it("answers in the shape Node asks for: one address, or all of them", async () => {
    const dns = fakeDns({ "rebind.example.com": ["93.184.216.34", "2606:2800:220:1::1"] });
    expect(await lookupWith(dns, false)).toEqual({ error: null, address: "93.184.216.34", family: 4 });
    expect(await lookupWith(dns, true)).toEqual({
      error: null,
      address: [
        { address: "93.184.216.34", family: 4 },
        { address: "2606:2800:220:1::1", family: 6 },
      ],
      family: undefined,
    });
  });

  it("refuses the whole name when any address is refused (rebinding to the metadata service)", async () => {
    const dns = fakeDns({ "rebind.example.com": ["93.184.216.34", "169.254.169.254"] });
    const { error } = await lookupWith(dns, true);
    expect(error).toBeInstanceOf(BlockedAddressError);
    expect(error).toMatchObject({ code: "ERR_WEBHOOK_ADDRESS_BLOCKED", hostname: "rebind.example.com", address: "169.254.169.254" });
    expect(error?.message).toBe(
      "webhook host rebind.example.com resolved to 169.254.169.254: 169.254.169.254 is a link-local address (set FRAUD_WEBHOOK_ALLOW_PRIVATE=true to allow it)",
    );
  });

  it("passes resolver errors through and reports an empty answer as ENOTFOUND", async () => {
    expect((await lookupWith(fakeDns({}), false)).error?.code).toBe("ENOTFOUND");
    expect((await lookupWith(fakeDns({ "rebind.example.com": [] }), false)).error?.code).toBe("ENOTFOUND");
  });
});

describe("guarded delivery POSTs against a real local receiver", () => {
  let receiver: http.Server;
  let port: number;
  /** Every connection the receiver accepted, and every request it answered. */
  let connections = 0;
  const requests: string[] = [];

  beforeAll(async () => {
    receiver = http.createServer((request, response) => {
      let body = "";
      request.setEncoding("utf8");
      request.on("data", (chunk: string) => (body += chunk));
      request.on("end", () => {
        requests.push(`${request.method ?? ""} ${request.headers.host ?? ""} ${body}`);
        response.end("ok");
      });
    });
    receiver.on("connection", () => connections++);
    await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    port = (receiver.address() as AddressInfo).port;
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => receiver.close(() => resolve()));
  });

  beforeEach(() => {
    connections = 0;
    requests.length = 0;
  });

  afterEach(() => {
    vi.restoreAllMocks();
  });

  /**
   * DNS rebinding without a network: from now on the system resolver answers
   * `name` with `address` (both the callback lookup Node connects with by
   * default and the promise one the guard uses); every other name resolves as usual.
   */
  function rebind(name: string, address: string): void {
    const realLookup = dns.lookup;
    const realPromiseLookup = dns.promises.lookup;
    const swap = (hostname: string) => (hostname === name ? address : hostname);
    const lookup = (hostname: string, ...rest: unknown[]): unknown => Reflect.apply(realLookup, dns, [swap(hostname), ...rest]);
    const promiseLookup = (hostname: string, ...rest: unknown[]): unknown => Reflect.apply(realPromiseLookup, dns.promises, [swap(hostname), ...rest]);
    vi.spyOn(dns, "lookup").mockImplementation(lookup as typeof dns.lookup);
    vi.spyOn(dns.promises, "lookup").mockImplementation(promiseLookup as typeof dns.promises.lookup);
  }

  it("refuses the local receiver by name and by literal address, without connecting", async () => {
    for (const url of [`http://localhost:${port}/hook`, `https://localhost:${port}/hook`]) {
      expect((await guardedPost(url, "{}", {}, strict)).error, url).toMatch(/^address_blocked: localhost names this host/);
    }
    for (const url of [`https://127.0.0.1:${port}/hook`, `https://[::ffff:127.0.0.1]:${port}/hook`]) {
      expect((await guardedPost(url, "{}", {}, strict)).error, url).toMatch(/^address_blocked: 127\.0\.0\.1 is a loopback address/);
    }
    expect(connections).toBe(0);
  });

  it("refuses at connection time a name that resolves to loopback (as after a DNS change), before anything reaches the receiver", async () => {
    rebind("rebound.example.com", "127.0.0.1");
    // The name passes every check that reads the URL alone: only its resolution at connection time gives it away.
    const url = `https://rebound.example.com:${port}/hook`;
    expect(checkWebhookUrl(url, strict)).toBeUndefined();
    const outcome = await guardedPost(url, '{"id":"evt_1"}', { "content-type": "application/json" }, strict);
    expect(outcome).toEqual({
      error: "address_blocked: webhook host rebound.example.com resolved to 127.0.0.1: 127.0.0.1 is a loopback address (set FRAUD_WEBHOOK_ALLOW_PRIVATE=true to allow it)",
    });
    expect(connections).toBe(0);
    expect(requests).toEqual([]);
    // The same name does lead to the receiver: where private addresses are allowed, the POST arrives.
    expect(await guardedPost(`http://rebound.example.com:${port}/hook`, '{"id":"evt_2"}', {}, relaxed)).toMatchObject({ status: 200 });
    expect(requests).toEqual([`POST rebound.example.com:${port} {"id":"evt_2"}`]);
  });

  it("reaches the local receiver when private addresses are allowed", async () => {
    expect(await guardedPost(`http://localhost:${port}/hook`, "{}", {}, relaxed)).toMatchObject({ status: 200 });
    expect(await guardedPost(`http://127.0.0.1:${port}/hook`, "{}", {}, relaxed)).toMatchObject({ status: 200 });
    expect(requests).toEqual([`POST localhost:${port} {}`, `POST 127.0.0.1:${port} {}`]);
  });
});
