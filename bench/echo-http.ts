// The HTTP/1.1 baseline: a bare node:http server that answers every request
// with its own body as JSON. It does no parsing on purpose: it is the floor a
// Node HTTP/1.1 service cannot go below on this machine, and REST decide and
// analyze are reported as a share of its throughput.

import http from "node:http";

const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (chunk: Buffer) => chunks.push(chunk));
  req.on("end", () => {
    const body = Buffer.concat(chunks);
    res.writeHead(200, { "content-type": "application/json", "content-length": body.length });
    res.end(body);
  });
});
// Same keep-alive window as the service, so neither closes idle benchmark sockets between phases.
server.keepAliveTimeout = 65_000;

server.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => {
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  process.stdout.write(JSON.stringify({ msg: "listening", port }) + "\n");
});

// The benchmark holds our stdin open; end-of-file means it is gone, even if it was killed outright.
process.stdin.resume();
process.stdin.on("end", () => process.exit(0));
process.once("SIGTERM", () => server.close(() => process.exit(0)));
