import type { ConnectError } from "@connectrpc/connect";
import { apiError } from "./errors.js";

// Query strings as the REST gateway and the event stream read them: strictly, each parameter's values in order.

/**
 * Percent-decoded text, or undefined when its percent-encoding is malformed or the bytes it encodes are not
 * UTF-8: decodeURIComponent refuses both, where URLSearchParams puts U+FFFD in their place, which would
 * filter on, or store, what the client never sent.
 */
export function percentDecoded(text: string): string | undefined {
  try {
    return decodeURIComponent(text);
  } catch {
    return undefined;
  }
}

export function notPercentEncoding(where: "query" | "path", name: string): ConnectError {
  return apiError("VALIDATION_ERROR", `${where} parameter ${name} is not valid percent-encoding`, {
    fieldViolations: [{ field: name, description: "is not valid percent-encoding" }],
  });
}

/** A query parameter the endpoint does not take. */
export function unknownParameter(name: string): ConnectError {
  return apiError("VALIDATION_ERROR", `unknown query parameter ${name}`, {
    fieldViolations: [{ field: name, description: "is not a parameter of this endpoint" }],
  });
}

/** A parameter given `times` times that takes one value: which one was meant cannot be told. `field` names it in the violation. */
export function repeatedParameter(name: string, times: number, field = name): ConnectError {
  return apiError("VALIDATION_ERROR", `query parameter ${name} is given ${times} times; give it once`, {
    fieldViolations: [{ field, description: "is given more than once" }],
  });
}

/**
 * The query's parameters by name, each with its values in order, split as URLSearchParams splits them ('&',
 * then the first '='; '+' is a space) but decoded strictly (percentDecoded). A name that does not decode is
 * named as it was sent.
 */
export function queryParameters(search: string): Map<string, string[]> {
  const parameters = new Map<string, string[]>();
  for (const pair of search.slice(1).split("&")) {
    if (pair === "") continue;
    const equals = pair.indexOf("=");
    const [rawName, rawValue] = equals === -1 ? [pair, ""] : [pair.slice(0, equals), pair.slice(equals + 1)];
    const name = percentDecoded(rawName.replaceAll("+", " "));
    if (name === undefined) throw notPercentEncoding("query", rawName);
    const value = percentDecoded(rawValue.replaceAll("+", " "));
    if (value === undefined) throw notPercentEncoding("query", name);
    const values = parameters.get(name);
    if (values) values.push(value);
    else parameters.set(name, [value]);
  }
  return parameters;
}
