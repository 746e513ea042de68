import {
  create,
  createRegistry,
  fromBinary,
  toBinary,
  type DescFile,
  type DescService,
  type MessageInitShape,
} from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import type { ConnectRouter } from "@connectrpc/connect";
import {
  ServerReflection,
  ServerReflectionRequestSchema,
  ServerReflectionResponseSchema,
  type ServerReflectionRequest,
} from "../../gen/grpc/reflection/v1/reflection_pb.js";
import {
  ServerReflection as ServerReflectionV1Alpha,
  ServerReflectionRequestSchema as V1AlphaRequestSchema,
  ServerReflectionResponseSchema as V1AlphaResponseSchema,
} from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";

/** gRPC status NOT_FOUND, as the reflection protocol's error_code expects. */
const NOT_FOUND = 5;

type ResponseInit = MessageInitShape<typeof ServerReflectionResponseSchema>;

/**
 * gRPC server reflection (v1 and v1alpha), so grpcurl and `buf curl` can list
 * and call the services with no .proto files at hand. Descriptors come from the
 * generated code, which embeds them: the contract in proto/ is the only source.
 */
export function registerReflection(router: ConnectRouter, served: readonly DescService[], alsoFiles: readonly DescFile[] = []): void {
  const files = new Set<DescFile>();
  const addWithDependencies = (file: DescFile) => {
    if (files.has(file)) return;
    files.add(file);
    file.dependencies.forEach(addWithDependencies);
  };
  served.forEach((service) => addWithDependencies(service.file));
  alsoFiles.forEach(addWithDependencies);
  const registry = createRegistry(...files);
  const filesByName = new Map([...files].map((file) => [file.proto.name, file]));
  const serviceNames = served.map((service) => service.typeName);

  const answer = (request: ServerReflectionRequest): ResponseInit => {
    const base = { validHost: request.host, originalRequest: request };
    const fileResponse = (file: DescFile | undefined, what: string): ResponseInit =>
      file
        ? {
            ...base,
            messageResponse: {
              case: "fileDescriptorResponse",
              value: { fileDescriptorProto: withDependencies(file).map((f) => toBinary(FileDescriptorProtoSchema, f.proto)) },
            },
          }
        : { ...base, messageResponse: { case: "errorResponse", value: { errorCode: NOT_FOUND, errorMessage: `${what} not found` } } };

    const message = request.messageRequest;
    switch (message.case) {
      case "listServices":
        return { ...base, messageResponse: { case: "listServicesResponse", value: { service: serviceNames.map((name) => ({ name })) } } };
      case "fileByFilename":
        return fileResponse(filesByName.get(message.value), `file ${message.value}`);
      case "fileContainingSymbol":
        return fileResponse(fileOfSymbol(message.value), `symbol ${message.value}`);
      case "fileContainingExtension": {
        const extendee = registry.getMessage(message.value.containingType);
        const extension = extendee && registry.getExtensionFor(extendee, message.value.extensionNumber);
        return fileResponse(extension?.file, `extension ${message.value.extensionNumber} of ${message.value.containingType}`);
      }
      case "allExtensionNumbersOfType": {
        const extendee = registry.getMessage(message.value);
        if (!extendee) return fileResponse(undefined, `type ${message.value}`);
        const numbers: number[] = [];
        for (const type of registry) if (type.kind === "extension" && type.extendee.typeName === extendee.typeName) numbers.push(type.number);
        return { ...base, messageResponse: { case: "allExtensionNumbersResponse", value: { baseTypeName: extendee.typeName, extensionNumber: numbers } } };
      }
      default:
        return { ...base, messageResponse: { case: "errorResponse", value: { errorCode: 3, errorMessage: "empty reflection request" } } };
    }
  };

  function fileOfSymbol(symbol: string): DescFile | undefined {
    const direct = registry.get(symbol);
    if (direct) return direct.file;
    // Methods and fields: look up their parent type.
    const dot = symbol.lastIndexOf(".");
    const parent = symbol.slice(0, dot);
    const ofParent = parent ? registry.get(parent)?.file : undefined;
    if (ofParent) return ofParent;
    // Enum values are scoped as siblings of their enum (fraud.v1.RESPONSE_SHAPE_ENVELOPE): an enum in the
    // same scope that has a value of that name.
    const name = symbol.slice(dot + 1);
    for (const type of registry) {
      if (type.kind === "enum" && type.typeName.slice(0, type.typeName.lastIndexOf(".")) === parent && type.values.some((value) => value.name === name)) return type.file;
    }
    return undefined;
  }

  function withDependencies(file: DescFile): DescFile[] {
    const ordered: DescFile[] = [];
    const visit = (f: DescFile) => {
      if (ordered.includes(f)) return;
      ordered.push(f);
      f.dependencies.forEach(visit);
    };
    visit(file);
    return ordered;
  }

  router.service(ServerReflection, {
    async *serverReflectionInfo(requests) {
      for await (const request of requests) yield answer(request);
    },
  });
  // v1alpha has the same wire format as v1: convert through bytes and reuse v1.
  router.service(ServerReflectionV1Alpha, {
    async *serverReflectionInfo(requests) {
      for await (const request of requests) {
        const v1 = fromBinary(ServerReflectionRequestSchema, toBinary(V1AlphaRequestSchema, request));
        const response = create(ServerReflectionResponseSchema, answer(v1));
        yield fromBinary(V1AlphaResponseSchema, toBinary(ServerReflectionResponseSchema, response));
      }
    },
  });
}
