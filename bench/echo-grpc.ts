// The gRPC baseline: a bare @grpc/grpc-js server with one generic unary
// handler on the Decide method path that returns the request bytes as the
// response. Passthrough serialisers keep protobuf out of it, so gRPC decide
// on the service is compared against grpc-js's own transport cost alone.

import * as grpc from "@grpc/grpc-js";

const DECIDE_PATH = "/fraud.v1.DecisionService/Decide";
const passthrough = (bytes: Buffer): Buffer => bytes;

const server = new grpc.Server();
server.register<Buffer, Buffer>(DECIDE_PATH, (call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>) => callback(null, call.request), passthrough, passthrough, "unary");

server.bindAsync(`127.0.0.1:${Number(process.env.PORT ?? 0)}`, grpc.ServerCredentials.createInsecure(), (error, port) => {
  if (error) throw error;
  process.stdout.write(JSON.stringify({ msg: "listening", port }) + "\n");
});

// The benchmark holds our stdin open; end-of-file means it is gone, even if it was killed outright.
process.stdin.resume();
process.stdin.on("end", () => process.exit(0));
process.once("SIGTERM", () => server.tryShutdown(() => process.exit(0)));
