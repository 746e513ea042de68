import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import type { Duplex } from "node:stream";
import type { Principal } from "../auth/key-service.js";

export type RequestListener = (
  req: http.IncomingMessage | http2.Http2ServerRequest,
  res: http.ServerResponse | http2.Http2ServerResponse,
) => void;

/** What a handler answered an upgrade request it took: 101 once switched, else its refusal; the key's principal when valid. */
export interface UpgradeOutcome {
  status: number;
  /** OK, or the refusal's error code. */
  code: string;
  principal?: Principal | undefined;
}

/**
 * Takes an HTTP/1.1 upgrade request's connection (WebSocket streams), saying
 * what it answered, at once or once it knows; undefined declines it.
 */
export type UpgradeHandler = (req: http.IncomingMessage, socket: Duplex, head: Buffer) => UpgradeOutcome | Promise<UpgradeOutcome> | undefined;

/**
 * Tells a client still sending when its whole answer has gone (a body over the limit, a refused call, an
 * unknown method) to stop, without error (RFC 9113, 8.1), instead of reading what it sends until the request
 * timeout; and drops what a handler left unread of a request (connect-node stops reading a message over the
 * limit): Node ends a stream only once its request has been read to its end, so the call would otherwise
 * stay in flight, holding shutdown, after its client had its answer. Destroying the stream does both: it
 * resets it with NO_ERROR. The compatibility layer sends an answer's trailers from its own wantTrailers
 * listener, which runs first; ending the stream in that same turn would drop them, so this waits one. An
 * answer without a body (a 204, headers ending the stream) asks for no trailers: it is over once the
 * stream's end has gone (localClose).
 */
function stopUploadAfterAnswer(stream: http2.ServerHttp2Stream): void {
  const unread = () => !stream.destroyed && (!stream.state.remoteClose || stream.readableLength > 0);
  const stopUpload = (answered: () => boolean) => {
    // The usual case: the whole request was in, and read, before the answer.
    if (!unread()) return;
    setImmediate(() => {
      if (unread() && answered()) stream.destroy();
    });
  };
  stream.once("wantTrailers", () => stopUpload(() => true));
  stream.once("finish", () => stopUpload(() => stream.state.localClose === 1));
}

/**
 * Answers what Node's HTTP/1.1 server could not take as a request (its 'clientError': malformed, headers over
 * its limit, not whole in time) on the request's connection, and ends it.
 */
export type ClientErrorHandler = (error: NodeJS.ErrnoException, socket: net.Socket) => void;

/** Node's HTTP/1.1 client errors that say the client went away. */
const CLIENT_GONE_ERRORS: ReadonlySet<string> = new Set(["ECONNRESET", "EPIPE", "HPE_INVALID_EOF_STATE"]);

/** Headers that ask for a protocol switch; dropped when a declined upgrade is served as plain HTTP/1.1. */
const UPGRADE_HEADERS = new Set(["upgrade", "connection", "http2-settings"]);

/** Every HTTP/2 connection opens with this preface; no HTTP/1.x request starts with "PRI". */
const HTTP2_PREFACE_START = Buffer.from("PRI");
/** A connection that sends nothing for this long is dropped before it is classified. */
const FIRST_BYTES_TIMEOUT_MS = 10_000;

/**
 * Streams one HTTP/2 session may have open at once: the 100 HTTP/2 recommends as the least to allow, which
 * bounds what one connection whose client does not read its answers can leave waiting in the server.
 */
const MAX_STREAMS_PER_SESSION = 100;

/** gRPC server reflection's methods (v1 and v1alpha). */
const REFLECTION_PATH_PREFIX = "/grpc.reflection.";

/** How long a client may take to send a request, and to keep a connection it does not use. */
export interface ConnectionTimeouts {
  /** Until an HTTP/1.1 request's headers are in (408 past it). */
  headersMs: number;
  /** Until a whole request is in, headers and body: 408 over HTTP/1.1, the stream cancelled over HTTP/2. */
  requestMs: number;
  /** An HTTP/1.1 connection, or an HTTP/2 session, with no request open this long is closed. */
  idleMs: number;
  /** How often HTTP/1.1 connections are looked over for the first two (Node's connectionsCheckingInterval). */
  checkIntervalMs: number;
}

const DEFAULT_CONNECTION_TIMEOUTS: ConnectionTimeouts = { headersMs: 20_000, requestMs: 30_000, idleMs: 65_000, checkIntervalMs: 1_000 };

/**
 * One plaintext port for HTTP/1.1 (REST, Connect, gRPC-Web) and HTTP/2 with
 * prior knowledge (gRPC, Connect). The first bytes of each connection decide
 * which server gets it; both share one request listener.
 */
export class DualProtocolListener {
  readonly http1: http.Server;
  readonly http2: http2.Http2Server;
  private readonly tcp: net.Server;
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  private readonly sockets = new Set<net.Socket>();

  constructor(
    listener: RequestListener,
    private readonly timeouts: ConnectionTimeouts = DEFAULT_CONNECTION_TIMEOUTS,
  ) {
    this.http1 = http.createServer(
      {
        keepAliveTimeout: timeouts.idleMs,
        requestTimeout: timeouts.requestMs,
        headersTimeout: timeouts.headersMs,
        connectionsCheckingInterval: timeouts.checkIntervalMs,
        // Node would answer a request without Host itself, with a bare 400 the request listener never sees:
        // the listener refuses it (dispatcher.ts), in the service's error envelope, logged.
        requireHostHeader: false,
      },
      listener,
    );
    // A client opens at most this many streams at once on a session (grpc-js multiplexes its calls on one).
    this.http2 = http2.createServer({ maxSessionMemory: 32, settings: { maxConcurrentStreams: MAX_STREAMS_PER_SESSION } }, listener);
    // CONNECT streams too: Node would answer them a bare 405 that no log or metric sees (dispatcher.ts answers them).
    this.http2.on("connect", listener);
    // A request with `Expect: 100-continue` too, on either version: Node would answer 100 at once, before anyone
    // knows whether the call is admitted; the dispatcher answers it once the body is to be read (letBodyCome).
    this.http1.on("checkContinue", listener);
    this.http2.on("checkContinue", listener);
    this.http2.on("session", (session) => {
      this.sessions.add(session);
      session.once("close", () => this.sessions.delete(session));
      this.closeWhenIdle(session);
    });
    this.http2.on("stream", (stream, headers) => {
      // Reflection is a bidirectional stream a tool keeps open while it asks: its request never "ends". It is
      // closed once it has been silent, both ways, for the idle timeout instead (it needs no key).
      if (headers[":path"]?.startsWith(REFLECTION_PATH_PREFIX)) stream.setTimeout(this.timeouts.idleMs, () => stream.close(http2.constants.NGHTTP2_CANCEL));
      else {
        this.limitRequestTime(stream);
        this.limitStalledAnswer(stream);
        stopUploadAfterAnswer(stream);
      }
    });
    this.tcp = net.createServer((socket) => {
      this.sockets.add(socket);
      socket.once("close", () => this.sockets.delete(socket));
      this.classify(socket);
    });
  }

  listen(port: number, host: string): Promise<net.AddressInfo> {
    return new Promise((resolve, reject) => {
      this.tcp.once("error", reject);
      this.tcp.listen(port, host, () => {
        this.tcp.off("error", reject);
        // Node arms the HTTP/1.1 server's request and headers timeouts (its connection tracking) when that
        // server emits 'listening'. It never listens itself, connections are handed to it, so it is told here;
        // without this, a client that stops halfway through a request would hold its connection forever.
        this.http1.emit("listening");
        resolve(this.tcp.address() as net.AddressInfo);
      });
    });
  }

  /**
   * Hands HTTP/1.1 upgrade requests to `handler`. Once an upgrade listener
   * exists, Node routes every request carrying an Upgrade header to it, so the
   * ones the handler declines (curl --http2 asks for h2c) are given back to the
   * HTTP/1.1 server without their upgrade headers and served as before: the
   * server may ignore an Upgrade it does not want (RFC 9110, 7.8). A handler
   * that throws costs its connection a 500, never the process: nothing above
   * this event would catch it.
   */
  onUpgrade(handler: UpgradeHandler): void {
    this.http1.on("upgrade", (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
      let taken: boolean;
      try {
        taken = handler(req, socket, head) !== undefined;
      } catch {
        socket.end("HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
        return;
      }
      if (taken) return;
      const lines = [`${req.method ?? "GET"} ${req.url ?? "/"} HTTP/${req.httpVersion}`];
      for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) {
        const name = req.rawHeaders[i] as string;
        if (!UPGRADE_HEADERS.has(name.toLowerCase())) lines.push(`${name}: ${req.rawHeaders[i + 1] as string}`);
      }
      socket.unshift(Buffer.concat([Buffer.from(`${lines.join("\r\n")}\r\n\r\n`, "latin1"), head]));
      this.http1.emit("connection", socket);
      socket.resume();
    });
  }

  /**
   * Hands what Node's HTTP/1.1 server cannot take as a request to `handler`, instead of Node's bare status
   * line (400, 431, 408) that no log or metric sees. A client that went away has no one left to answer: a
   * connection reset, closed while written to, or closed in the middle of a request (HPE_INVALID_EOF_STATE:
   * a half-close cannot be told from a close, and a request cut so is the client's leaving, 499) is
   * destroyed. HTTP/2 has no such event: nghttp2 refuses a malformed stream itself (RST_STREAM), before any
   * request exists.
   */
  onClientError(handler: ClientErrorHandler): void {
    this.http1.on("clientError", (error: NodeJS.ErrnoException, socket: net.Socket) => {
      if (CLIENT_GONE_ERRORS.has(error.code ?? "") || !socket.writable) socket.destroy();
      else handler(error, socket);
    });
  }

  /** Hands HTTP/1.1 CONNECT requests to `handler`: Node gives them no response, and closes them unanswered without it. */
  onConnect(handler: (req: http.IncomingMessage, socket: net.Socket) => void): void {
    this.http1.on("connect", (req: http.IncomingMessage, socket: net.Socket) => handler(req, socket));
  }

  /** Stops accepting connections and asks open ones to finish (GOAWAY, Connection: close). */
  stopAccepting(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.tcp.close(() => resolve()));
    for (const session of this.sessions) session.close();
    this.http1.closeIdleConnections();
    return closed;
  }

  /** Ends whatever is still open. */
  destroyAll(): void {
    for (const session of this.sessions) session.destroy();
    for (const socket of this.sockets) socket.destroy();
  }

  /** Cancels a stream whose request is not all in within the request timeout, as HTTP/1.1 answers 408. */
  private limitRequestTime(stream: http2.ServerHttp2Stream): void {
    const timer = setTimeout(() => {
      // remoteClose: the client has ended its side (the whole request is in), whether it was read yet or not.
      if (!stream.destroyed && !stream.state.remoteClose) stream.close(http2.constants.NGHTTP2_CANCEL);
    }, this.timeouts.requestMs);
    timer.unref();
    stream.once("close", () => clearTimeout(timer));
  }

  /**
   * Cancels a stream whose answer has started and then not moved for the idle
   * timeout: a client that never takes its answers (a flow-control window
   * left at zero) would otherwise have the server hold them for as long as its
   * session lives. A handler still working on its answer (no headers sent),
   * or an answer pausing with nothing waiting to be sent (a watch between two
   * messages), is left alone.
   *
   * Node's stream timeout does the measuring: the stream's own traffic pushes
   * it back, and an expiry passes while the session still sends anything, so
   * a slow but steady reader is never cut. The price is the bound: a stall is
   * cancelled from 65 s on, and by about twice that (later while other streams
   * of its session keep moving). A timer of its own, looking at what the
   * stream still had to send, cut healthy streams after a short pause.
   */
  private limitStalledAnswer(stream: http2.ServerHttp2Stream): void {
    stream.setTimeout(this.timeouts.idleMs);
    stream.on("timeout", () => {
      if (stream.headersSent && stream.bufferSize > 0) stream.close(http2.constants.NGHTTP2_CANCEL);
    });
  }

  /** Closes (GOAWAY) a session that has had no stream open for the idle timeout, as keep-alive does for HTTP/1.1. */
  private closeWhenIdle(session: http2.ServerHttp2Session): void {
    let open = 0;
    let timer: NodeJS.Timeout | undefined;
    const arm = () => {
      timer = setTimeout(() => session.close(), this.timeouts.idleMs);
      timer.unref();
    };
    session.on("stream", (stream: http2.ServerHttp2Stream) => {
      open++;
      clearTimeout(timer);
      stream.once("close", () => {
        if (--open === 0 && !session.closed) arm();
      });
    });
    session.once("close", () => clearTimeout(timer));
    arm();
  }

  private classify(socket: net.Socket): void {
    socket.setTimeout(FIRST_BYTES_TIMEOUT_MS, () => socket.destroy());
    let received = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      const compared = Math.min(received.length, HTTP2_PREFACE_START.length);
      const looksHttp2 = received.subarray(0, compared).equals(HTTP2_PREFACE_START.subarray(0, compared));
      if (looksHttp2 && received.length < HTTP2_PREFACE_START.length) return; // wait for more bytes
      socket.off("data", onData);
      socket.setTimeout(0);
      socket.pause();
      socket.unshift(received);
      if (looksHttp2) {
        // The HTTP/2 session reads what is buffered on the socket itself (next
        // tick); resuming here would flow those bytes to no one.
        this.http2.emit("connection", socket);
      } else {
        this.http1.emit("connection", socket);
        socket.resume();
      }
    };
    socket.on("data", onData);
    socket.on("error", () => socket.destroy());
  }
}
