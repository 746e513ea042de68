/**
 * The URL of a request from its target. An origin-form target ("/path?query")
 * is appended to a fixed origin rather than resolved against it: resolved,
 * "//evil/api/v1/cases" would be read as host "evil" and path "/api/v1/cases"
 * and served as that endpoint. Other forms (absolute, from a proxy) are
 * resolved as usual. Undefined when the target is no URL at all.
 */
export function requestUrl(target: string | undefined): URL | undefined {
  const raw = target ?? "/";
  try {
    return raw.startsWith("/") ? new URL(`http://localhost${raw}`) : new URL(raw, "http://localhost");
  } catch {
    return undefined;
  }
}
