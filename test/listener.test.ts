import http2 from "node:http2";
import net from "node:net";
import type { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DualProtocolListener, type ConnectionTimeouts } from "../src/server/listener.js";

// Short timeouts, so that a client that stops halfway is dropped within the test (Node's own timers: no clock to inject).
const TIMEOUTS: ConnectionTimeouts = { headersMs: 300, requestMs: 600, idleMs: 800, checkIntervalMs: 100 };
/** An answer written as fast as its client takes it, for longer than the idle timeout, then ended. */
function flood(res: Writable): void {
  const until = performance.now() + 3 * TIMEOUTS.idleMs;
  const chunk = Buffer.alloc(1024, 97);
  const pump = () => {
    while (performance.now() < until) {
      if (!res.write(chunk)) {
        res.once("drain", pump);
        return;
      }
    }
    res.end();
  };
  pump();
}

/** Longer than the request timeout: the deadline is for receiving a request, not for answering it. */
const SLOW_ANSWER_MS = 1_000;

let listener: DualProtocolListener;
let port: number;

beforeAll(async () => {
  listener = new DualProtocolListener((req, res) => {
    // An answer before the request is all in, as to a body over the limit: with a body, or with none.
    if (req.url === "/early") return void res.end("refused");
    if (req.url === "/early-empty") return void res.writeHead(204).end();
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      if (req.url === "/flood") return flood(res as Writable);
      // An answer that starts at once and then pauses between its parts, as a watch does between messages.
      if (req.url === "/paused") (res as Writable).write("first;");
      setTimeout(() => res.end(`got ${Buffer.concat(chunks).length} bytes`), req.url === "/slow" || req.url === "/paused" ? SLOW_ANSWER_MS : 0);
    });
  }, TIMEOUTS);
  port = (await listener.listen(0, "127.0.0.1")).port;
});
afterAll(async () => {
  const stopped = listener.stopAccepting();
  listener.destroyAll();
  await stopped;
});

/** Writes `text` on a raw connection and resolves with what came back once the server closes it, and when. */
function rawHttp1(text: string): Promise<{ answer: string; closedAfterMs: number }> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const socket = net.connect(port, "127.0.0.1", () => socket.write(text));
    let answer = "";
    socket.on("data", (chunk) => (answer += chunk));
    socket.on("error", reject);
    socket.on("close", () => resolve({ answer, closedAfterMs: performance.now() - started }));
  });
}

describe("connection timeouts over HTTP/1.1", () => {
  it("answers 408 and closes a connection whose headers never end", async () => {
    const { answer, closedAfterMs } = await rawHttp1("GET / HTTP/1.1\r\nHost: x\r\n");
    expect(answer).toMatch(/^HTTP\/1.1 408 /);
    expect(closedAfterMs).toBeGreaterThanOrEqual(TIMEOUTS.headersMs - 50);
  });

  it("answers 408 and closes a connection whose body never ends", async () => {
    const { answer, closedAfterMs } = await rawHttp1("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"u");
    expect(answer).toMatch(/^HTTP\/1.1 408 /);
    expect(closedAfterMs).toBeGreaterThanOrEqual(TIMEOUTS.requestMs - 50);
  });

  it("answers a whole request however long the answer takes, then closes the idle connection", async () => {
    const { answer, closedAfterMs } = await rawHttp1("POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}");
    expect(answer).toMatch(/^HTTP\/1.1 200 [\s\S]*got 2 bytes$/);
    expect(closedAfterMs).toBeGreaterThanOrEqual(SLOW_ANSWER_MS + TIMEOUTS.idleMs - 50);
  });
});

describe("connection timeouts over HTTP/2", () => {
  it("cancels a stream whose request never ends, and still answers a whole one that takes long", async () => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    try {
      const stalled = session.request({ ":method": "POST", ":path": "/" });
      stalled.write("{\"u");
      const slow = session.request({ ":method": "POST", ":path": "/slow" });
      slow.end("{}");
      const cancelled = new Promise<number>((resolve) => stalled.on("close", () => resolve(stalled.rstCode ?? -1)));
      stalled.on("error", () => undefined);
      let body = "";
      slow.on("data", (chunk: Buffer) => (body += chunk.toString()));
      const answered = new Promise<string>((resolve) => slow.on("end", () => resolve(body)));
      expect(await cancelled).toBe(http2.constants.NGHTTP2_CANCEL);
      expect(await answered).toBe("got 2 bytes");
    } finally {
      session.destroy();
    }
  });

  for (const [path, expected] of [["/early", "refused"], ["/early-empty", ""]] as const) {
    it(`tells a client still sending when its answer is whole to stop, without error, not at the request timeout (${path})`, async () => {
      const session = http2.connect(`http://127.0.0.1:${port}`);
      try {
        const started = performance.now();
        const sending = session.request({ ":method": "POST", ":path": path });
        const pump = setInterval(() => {
          if (!sending.destroyed && sending.writable) sending.write(Buffer.alloc(16 * 1024, 32));
        }, 10);
        sending.on("error", () => undefined);
        let body = "";
        sending.on("data", (chunk: Buffer) => (body += chunk.toString()));
        const ended = new Promise<void>((resolve) => sending.on("end", () => resolve()));
        const closed = new Promise<number>((resolve) => sending.on("close", () => resolve(sending.rstCode ?? -1)));
        const rstCode = await closed;
        clearInterval(pump);
        await ended;
        expect(body).toBe(expected);
        expect(rstCode).toBe(http2.constants.NGHTTP2_NO_ERROR);
        expect(performance.now() - started).toBeLessThan(TIMEOUTS.requestMs);
      } finally {
        session.destroy();
      }
    });
  }

  it("leaves a reflection stream open while the tool keeps asking, and cancels it once silent for the idle timeout", async () => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    try {
      const reflection = session.request({ ":method": "POST", ":path": "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo" });
      reflection.on("error", () => undefined);
      let closedAt: number | undefined;
      reflection.on("close", () => (closedAt = performance.now()));
      // A question every 150 ms for longer than the request timeout: still open (and a stall of this
      // process of over half a second would not be taken for the tool's silence).
      for (let i = 0; i < 8; i++) {
        reflection.write(`question ${i}`);
        await new Promise((resolve) => setTimeout(resolve, 150));
      }
      expect(closedAt).toBeUndefined();
      const silentFrom = performance.now();
      await expect.poll(() => closedAt, { timeout: 5_000, interval: 50 }).toBeDefined();
      expect((closedAt ?? 0) - silentFrom).toBeGreaterThanOrEqual(TIMEOUTS.idleMs - 350);
      expect(reflection.rstCode).toBe(http2.constants.NGHTTP2_CANCEL);
    } finally {
      session.destroy();
    }
  });

  it("cancels a stream whose client never takes its answer, once the answer has not moved for the idle timeout", async () => {
    // A flow-control window of zero: the server may send the answer's headers, never a byte of its body.
    const session = http2.connect(`http://127.0.0.1:${port}`, { settings: { initialWindowSize: 0 } });
    try {
      const started = performance.now();
      const stalled = session.request({ ":method": "POST", ":path": "/" });
      stalled.on("error", () => undefined);
      stalled.end("{}");
      const closed = new Promise<number>((resolve) => stalled.on("close", () => resolve(stalled.rstCode ?? -1)));
      expect(await closed).toBe(http2.constants.NGHTTP2_CANCEL);
      const elapsed = performance.now() - started;
      expect(elapsed).toBeGreaterThanOrEqual(TIMEOUTS.idleMs - 50);
      expect(elapsed).toBeLessThan(TIMEOUTS.idleMs * 3);
    } finally {
      session.destroy();
    }
  });

  it("cancels each of two stalled streams of one session, neither before the idle timeout", async () => {
    const session = http2.connect(`http://127.0.0.1:${port}`, { settings: { initialWindowSize: 0 } });
    try {
      const open = (): Promise<number> => {
        const started = performance.now();
        const stream = session.request({ ":method": "POST", ":path": "/" });
        stream.on("error", () => undefined);
        stream.end("{}");
        return new Promise((resolve) => stream.on("close", () => resolve(performance.now() - started)));
      };
      const first = open();
      await new Promise((resolve) => setTimeout(resolve, 150));
      const second = open();
      for (const elapsed of await Promise.all([first, second])) {
        expect(elapsed).toBeGreaterThanOrEqual(TIMEOUTS.idleMs - 50);
        // Later than one alone: the other's reset is traffic of the session, which puts the expiry off.
        expect(elapsed).toBeLessThan(TIMEOUTS.idleMs * 4);
      }
    } finally {
      session.destroy();
    }
  });

  it("never cancels a slow reader that keeps taking its answer, nor one that paused a while first", async () => {
    for (const firstPauseMs of [0, 300]) {
      const session = http2.connect(`http://127.0.0.1:${port}`, { settings: { initialWindowSize: 16_384 } });
      try {
        const stream = session.request({ ":method": "POST", ":path": "/flood" });
        stream.end("{}");
        stream.on("error", () => undefined);
        stream.pause();
        // Reads a chunk, then rests: the server's buffer stays as full as the reader lets it be.
        setTimeout(() => {
          stream.on("data", () => {
            stream.pause();
            setTimeout(() => stream.resume(), 50);
          });
          stream.resume();
        }, firstPauseMs);
        await new Promise((resolve) => stream.on("close", resolve));
        expect(stream.rstCode, `first pause ${firstPauseMs} ms`).toBe(http2.constants.NGHTTP2_NO_ERROR);
      } finally {
        session.destroy();
      }
    }
  }, 20_000);

  it("leaves open a stream whose answer pauses with nothing waiting to be sent, longer than the idle timeout's half", async () => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    try {
      const paused = session.request({ ":method": "POST", ":path": "/paused" });
      paused.end("{}");
      let body = "";
      paused.on("data", (chunk: Buffer) => (body += chunk.toString()));
      await new Promise((resolve) => paused.on("end", resolve));
      expect(body).toBe("first;got 2 bytes");
      expect(paused.rstCode).toBe(http2.constants.NGHTTP2_NO_ERROR);
    } finally {
      session.destroy();
    }
  });

  it("closes a session that has had no stream open for the idle timeout", async () => {
    const started = performance.now();
    const session = http2.connect(`http://127.0.0.1:${port}`);
    const request = session.request({ ":path": "/" });
    request.resume();
    await new Promise((resolve) => request.on("end", resolve));
    const goaway = new Promise<void>((resolve) => session.once("goaway", () => resolve()));
    await goaway;
    expect(performance.now() - started).toBeGreaterThanOrEqual(TIMEOUTS.idleMs - 50);
    session.destroy();
  });
});
