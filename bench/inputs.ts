// The decide-shaped requests every benchmark sends: the load runs serialise
// them (JSON for REST and Connect, protobuf for gRPC and gRPC-Web) and the
// engine micro-benchmark feeds them to the engine directly. The personas cover
// the branches that cost the most (user-agent parsing, IPv6 and mapped
// addresses, disposable and malformed e-mail, VM renderers, missing device
// data), so neither benchmark measures only the cheapest path.
//
// The types are written out here instead of reusing EngineInput because the
// protobuf-es `create()` initialiser wants mutable arrays; BenchRequest is
// still assignable to EngineInput, which bench/engine.ts relies on.

import { IPHONE_DEVICE, USER_AGENTS, WINDOWS_DESKTOP_DEVICE } from "../test/helpers/browsers.js";

export interface BenchDevice {
  webdriver?: boolean;
  webglRenderer?: string;
  webglVendor?: string;
  timezone?: string;
  languages?: string[];
  platform?: string;
  screen?: { width: number; height: number; colorDepth: number; pixelRatio: number };
  hardwareConcurrency?: number;
  deviceMemory?: number;
  touchSupport?: { maxTouchPoints: number; touchEvent: boolean };
}

export interface BenchBehavior {
  timeOnPageMs?: number;
  formFillMs?: number;
  keystrokes?: number;
  pointerMoves?: number;
  pasteEvents?: number;
  clicks?: number;
}

export interface BenchRequest {
  userId: string;
  action: string;
  email?: string;
  ip?: string;
  deviceId?: string;
  sessionId?: string;
  userAgent?: string;
  amount?: number;
  currency?: string;
  device?: BenchDevice;
  behavior?: BenchBehavior;
  metadata?: Record<string, string>;
}

const UA = USER_AGENTS;

const DESKTOP_DEVICE: BenchDevice = WINDOWS_DESKTOP_DEVICE;

const HUMAN_BEHAVIOR: BenchBehavior = { timeOnPageMs: 14_000, formFillMs: 6_200, keystrokes: 24, pointerMoves: 130, pasteEvents: 0, clicks: 3 };

/** One persona per entry; `i` varies the identifiers so the service sees many users, devices and addresses. */
const PERSONAS: ReadonlyArray<{ name: string; make(i: number): BenchRequest }> = [
  {
    name: "desktop login (GB)",
    make: (i) => ({
      userId: `user_${1000 + i}`,
      action: "login",
      email: `jane.doe${i}@gmail.com`,
      ip: `81.2.69.${160 + i}`,
      deviceId: `vis_desk${i}`,
      sessionId: `sess_d${i}`,
      userAgent: UA.windowsChrome,
      device: DESKTOP_DEVICE,
      behavior: HUMAN_BEHAVIOR,
    }),
  },
  {
    name: "iPhone checkout",
    make: (i) => ({
      userId: `user_${2000 + i}`,
      action: "checkout",
      email: `sam.lee${i}@icloud.com`,
      ip: `86.${10 + i}.44.12`,
      deviceId: `vis_ios${i}`,
      sessionId: `sess_i${i}`,
      userAgent: UA.iphoneSafari,
      amount: 59.9 + i,
      currency: "GBP",
      device: IPHONE_DEVICE,
      behavior: { timeOnPageMs: 9_000, formFillMs: 4_000, keystrokes: 20, pointerMoves: 0, pasteEvents: 0, clicks: 4 },
      metadata: { orderId: `ord_${i}`, cardBin: "424242" },
    }),
  },
  {
    name: "headless signup, disposable e-mail",
    make: (i) => ({
      userId: `user_${3000 + i}`,
      action: "signup",
      email: `promo${i}@mailinator.com`,
      ip: `34.86.${i}.10`,
      deviceId: `vis_bot${i}`,
      sessionId: `sess_b${i}`,
      userAgent: UA.headlessChrome,
      device: {
        webdriver: true,
        webglRenderer: "Google SwiftShader",
        webglVendor: "Google Inc.",
        timezone: "America/New_York",
        languages: [],
        platform: "Linux x86_64",
        screen: { width: 800, height: 600, colorDepth: 24, pixelRatio: 1 },
        hardwareConcurrency: 2,
        touchSupport: { maxTouchPoints: 0, touchEvent: false },
      },
      behavior: { timeOnPageMs: 400, formFillMs: 35, keystrokes: 0, pointerMoves: 0, pasteEvents: 3, clicks: 1 },
    }),
  },
  {
    name: "server-to-server transfer, no device",
    make: (i) => ({
      userId: `user_${4000 + i}`,
      action: "transfer",
      email: `accounts${i}@example.com`,
      ip: `8.8.${i}.4`,
      deviceId: "",
      userAgent: UA.pythonRequests,
      amount: 2_500 + 10 * i,
      currency: "USD",
    }),
  },
  {
    name: "Android purchase over IPv6, zone mismatch",
    make: (i) => ({
      userId: `user_${5000 + i}`,
      action: "purchase",
      email: `m.santos${i}@yahoo.com`,
      ip: `2a03:2880:f10c:83:face:b00c:0:${(0x25de + i).toString(16)}`,
      deviceId: `vis_and${i}`,
      sessionId: `sess_a${i}`,
      userAgent: UA.androidChrome,
      amount: 120 + i,
      currency: "USD",
      device: {
        webglRenderer: "Adreno (TM) 740",
        webglVendor: "Qualcomm",
        timezone: "Asia/Manila",
        languages: ["en-US", "fil"],
        platform: "Linux armv81",
        screen: { width: 412, height: 915, colorDepth: 24, pixelRatio: 2.625 },
        hardwareConcurrency: 8,
        deviceMemory: 8,
        touchSupport: { maxTouchPoints: 5, touchEvent: true },
      },
      behavior: { timeOnPageMs: 21_000, formFillMs: 9_000, keystrokes: 31, pointerMoves: 0, pasteEvents: 1, clicks: 6 },
    }),
  },
  {
    name: "password change from a private address",
    make: (i) => ({
      userId: `user_${6000 + i}`,
      action: "password_change",
      ip: `10.0.${i}.5`,
      deviceId: `vis_mac${i}`,
      sessionId: `sess_m${i}`,
      userAgent: UA.macSafari,
      device: {
        webglRenderer: "Apple M2",
        webglVendor: "Apple Inc.",
        timezone: "America/Los_Angeles",
        languages: ["en-US"],
        platform: "MacIntel",
        screen: { width: 1512, height: 982, colorDepth: 30, pixelRatio: 2 },
        hardwareConcurrency: 8,
        touchSupport: { maxTouchPoints: 0, touchEvent: false },
      },
      behavior: HUMAN_BEHAVIOR,
    }),
  },
  {
    name: "trial start, random e-mail, VM",
    make: (i) => ({
      userId: `user_${7000 + i}`,
      action: "trial_start",
      email: `xk7q9zt2v8w${i}@gmail.com`,
      ip: `185.220.101.${i + 1}`,
      deviceId: `vis_vm${i}`,
      sessionId: `sess_v${i}`,
      userAgent: UA.windowsChrome,
      device: { ...DESKTOP_DEVICE, webglRenderer: "VMware SVGA 3D", webglVendor: "VMware, Inc.", timezone: "Europe/Berlin" },
      behavior: { timeOnPageMs: 2_100, formFillMs: 300, keystrokes: 2, pointerMoves: 4, pasteEvents: 2, clicks: 1 },
    }),
  },
  {
    name: "login, malformed e-mail, mapped IPv4",
    make: (i) => ({
      userId: `user_${8000 + i}`,
      action: "login",
      email: `not-an-email-${i}`,
      ip: `::ffff:81.2.69.${10 + i}`,
      deviceId: `vis_fx${i}`,
      sessionId: `sess_f${i}`,
      userAgent: UA.linuxFirefox,
      device: { ...DESKTOP_DEVICE, platform: "Linux x86_64", webglRenderer: "Mesa Intel(R) UHD Graphics 620", webglVendor: "Intel" },
    }),
  },
];

/** Variants per persona: enough distinct users and addresses to keep caches honest, few enough to pre-serialise. */
const VARIANTS = 8;

export interface NamedRequest {
  persona: string;
  request: BenchRequest;
}

/** Every persona × VARIANTS, interleaved so consecutive requests differ in kind. */
export function benchRequests(): NamedRequest[] {
  const list: NamedRequest[] = [];
  for (let i = 0; i < VARIANTS; i++) {
    for (const persona of PERSONAS) list.push({ persona: persona.name, request: persona.make(i) });
  }
  return list;
}

/** The analyze-shaped form of a request: AnalyzeRequest has no amount or currency. */
export function toAnalyzeRequest(request: BenchRequest): BenchRequest {
  const { amount: _amount, currency: _currency, ...rest } = request;
  return rest;
}
