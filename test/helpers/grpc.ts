import * as grpc from "@grpc/grpc-js";
import { create, fromBinary, toBinary, type DescMessage, type DescService, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";

/** A @grpc/grpc-js client (the canonical gRPC implementation) over h2c to the test server. */
export function grpcClient(port: number, options: grpc.ClientOptions = {}): grpc.Client {
  return new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), options);
}

export interface GrpcResult<O> {
  error: grpc.ServiceError | null;
  response: O | undefined;
  trailers: grpc.Metadata | undefined;
  headers: grpc.Metadata | undefined;
}

/** Calls a unary method and resolves with its outcome, error or not. */
export function grpcUnary<I extends DescMessage, O extends DescMessage>(
  client: grpc.Client,
  service: DescService,
  methodName: string,
  input: I,
  output: O,
  request: MessageInitShape<I>,
  metadata: Record<string, string> = {},
): Promise<GrpcResult<MessageShape<O>>> {
  const method = service.methods.find((m) => m.name === methodName);
  if (!method) throw new Error(`no method ${methodName}`);
  const meta = new grpc.Metadata();
  for (const [key, value] of Object.entries(metadata)) meta.set(key, value);
  return new Promise((resolve) => {
    let headers: grpc.Metadata | undefined;
    let trailers: grpc.Metadata | undefined;
    const call = client.makeUnaryRequest<MessageShape<I>, MessageShape<O>>(
      `/${service.typeName}/${method.name}`,
      (message) => Buffer.from(toBinary(input, message)),
      (bytes) => fromBinary(output, bytes),
      create(input, request),
      meta,
      { deadline: Date.now() + 10_000 },
      (error, response) => {
        // The status event carries the trailers; it fires right after this callback.
        setImmediate(() => resolve({ error, response, trailers, headers }));
      },
    );
    call.on("metadata", (m) => (headers = m));
    call.on("status", (status) => (trailers = status.metadata));
  });
}
