import type { DescService } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { apiError } from "../api/errors.js";

/**
 * Implementation of a service whose capability has not landed yet: every RPC
 * is routed, authenticated, rate-limited and validated like the real one,
 * then answers NOT_IMPLEMENTED (HTTP 501) saying what is missing.
 */
export function pendingService<S extends DescService>(service: S, missing: string): ServiceImpl<S> {
  const impl: Record<string, () => never> = {};
  for (const method of service.methods) {
    impl[method.localName] = () => {
      throw apiError("NOT_IMPLEMENTED", `${method.name} is not available yet: ${missing}`);
    };
  }
  return impl as unknown as ServiceImpl<S>;
}
