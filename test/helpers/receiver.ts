import http from "node:http";
import type { AddressInfo } from "node:net";

export interface ReceivedRequest {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

export interface Reply {
  status: number;
  headers?: Record<string, string>;
  /** Runs once the request is in, before it is answered: a change made while a delivery is in flight. */
  beforeReplying?: () => Promise<unknown>;
}

/** A real HTTP receiver on 127.0.0.1 that records every request and answers as told. */
export interface Receiver {
  url: string;
  requests: ReceivedRequest[];
  /** Answers for the next requests, in order; 200 once they run out. */
  replies: Reply[];
  close(): Promise<void>;
}

export async function startReceiver(): Promise<Receiver> {
  const requests: ReceivedRequest[] = [];
  const replies: Reply[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      requests.push({ method: req.method ?? "", path: req.url ?? "", headers: req.headers, body: Buffer.concat(chunks).toString("utf8") });
      const reply = replies.shift() ?? { status: 200 };
      void (reply.beforeReplying?.() ?? Promise.resolve()).then(() => {
        res.writeHead(reply.status, reply.headers);
        res.end();
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    requests,
    replies,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
