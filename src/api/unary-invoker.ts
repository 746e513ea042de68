import { create, isMessage, type DescMethod, type DescMethodUnary, type MessageShape } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createContextValues,
  type HandlerContext,
  type Interceptor,
  type ServiceImplSpec,
  type UnaryResponse,
} from "@connectrpc/connect";
import { withCallContext, type CallContext } from "./context.js";

/** A service's unary method as Connect's router holds it (ServiceImplSpec). */
type UnarySpec = Extract<ServiceImplSpec["methods"][string], { kind: "unary" }>;
/** What an interceptor wraps: a call of any kind (only unary ones are made here). */
type Call = Parameters<Interceptor>[0];

/** One unary call as a transport hands it over, its input already decoded. */
export interface UnaryCall {
  method: DescMethodUnary;
  message: MessageShape<DescMethodUnary["input"]>;
  /** Request headers (or gRPC metadata) the interceptors and the implementation may read. */
  header: Headers;
  /** Aborted when the client goes away or the call's deadline passes. */
  signal: AbortSignal;
  /** Milliseconds left before the deadline, if the call has one. */
  timeoutMs: () => number | undefined;
  protocolName: string;
  requestMethod: string;
  url: string;
  context: CallContext;
}

/**
 * Calls the router's unary implementations through the interceptors, in the
 * order Connect's router applies them (the first outermost), without a
 * Connect request: the transports that read and write messages themselves
 * (the REST gateway, the unary gRPC path) use it, so that every protocol
 * shares one chain of errors, auth, rate limits and validation. It builds
 * what Connect's createHandlerContext builds, minus the deadline signal and
 * the linked abort controller, whose AbortError per call is costly
 * (docs/benchmarks.md): the transport passes one signal that it aborts only
 * when the call is cut short.
 */
export class UnaryInvoker {
  private readonly specs = new Map<DescMethod, UnarySpec>();
  private readonly byPath = new Map<string, DescMethodUnary>();

  constructor(
    services: readonly ServiceImplSpec[],
    private readonly interceptors: readonly Interceptor[],
  ) {
    for (const service of services) {
      for (const spec of Object.values(service.methods)) {
        if (spec.kind !== "unary") continue;
        this.specs.set(spec.method, spec);
        this.byPath.set(`/${service.service.typeName}/${spec.method.name}`, spec.method);
      }
    }
  }

  /** Whether the method has an implementation. */
  serves(method: DescMethod): method is DescMethodUnary {
    return this.specs.has(method);
  }

  /** The unary method at an RPC path (`/fraud.v1.DecisionService/Decide`), if one is served there. */
  at(path: string): DescMethodUnary | undefined {
    return this.byPath.get(path);
  }

  /** Runs the call; rejects with whatever the interceptors throw (the error interceptor makes it an apiError). */
  async invoke(call: UnaryCall): Promise<UnaryResponse> {
    const { method } = call;
    const spec = this.specs.get(method);
    if (!spec) throw new ConnectError(`${method.parent.typeName}.${method.name} is not implemented`, Code.Unimplemented);
    const handlerContext: HandlerContext = {
      service: method.parent,
      method,
      protocolName: call.protocolName,
      requestMethod: call.requestMethod,
      url: call.url,
      signal: call.signal,
      timeoutMs: call.timeoutMs,
      requestHeader: call.header,
      responseHeader: new Headers(),
      responseTrailer: new Headers(),
      values: withCallContext(createContextValues(), call.context),
    };
    const implementation: Call = async (request) => {
      if (request.stream) throw new ConnectError("a unary method was called with a stream", Code.Internal);
      const output = await spec.impl(request.message, {
        ...handlerContext,
        requestHeader: request.header,
        signal: request.signal,
        values: request.contextValues,
      });
      return {
        stream: false,
        service: method.parent,
        method,
        header: handlerContext.responseHeader,
        trailer: handlerContext.responseTrailer,
        message: isMessage(output, method.output) ? output : create(method.output, output),
      };
    };
    const chain = this.interceptors.reduceRight((next, interceptor) => interceptor(next), implementation);
    const result = await chain({
      stream: false,
      service: method.parent,
      method,
      requestMethod: handlerContext.requestMethod,
      url: handlerContext.url,
      signal: handlerContext.signal,
      header: handlerContext.requestHeader,
      contextValues: handlerContext.values,
      message: call.message,
    });
    if (result.stream) throw new ConnectError("an interceptor answered a unary call with a stream", Code.Internal);
    return result;
  }
}
