import type { AuditActor } from "../audit/entry.js";
import { parseKeyShape, type Environment } from "../auth/keys.js";
import type { AuditTrail } from "../audit/log.js";
import type { Clock } from "../clock.js";
import type { ConsortiumRepository } from "../store/consortium.js";
import type { Tenant } from "../store/tenant.js";
import { MALFORMED_URL_PROBLEMS, checkWebhookDestination, checkWebhookUrl, type GuardOptions, type Resolver } from "../webhooks/address-guard.js";
import { MIN_CONSORTIUM_KEY_LENGTH } from "./indicators.js";

export interface MembershipInput {
  key: string;
  /** Both or neither: sharing needs the ingest URL and this member's key there. */
  shareUrl: string;
  shareToken: string;
}

/**
 * What is wrong with a membership's input by itself, whatever the installation's settings and DNS say: a key too
 * short, a URL without its token or the reverse, a token no header can carry, a URL that is not one. fraudctl
 * answers these as a wrong command line.
 */
export function malformedMembership(input: MembershipInput): string[] {
  const problems: string[] = [];
  if (input.key.length < MIN_CONSORTIUM_KEY_LENGTH) problems.push(`the consortium key must have at least ${MIN_CONSORTIUM_KEY_LENGTH} characters`);
  if ((input.shareUrl === "") !== (input.shareToken === "")) problems.push("sharing needs both the URL and the token");
  // Sent as a header (X-API-Key): a value no header can carry would fail every share, long after it was saved.
  if (input.shareToken !== "" && !/^[\x21-\x7e]{1,512}$/.test(input.shareToken)) {
    problems.push("the token must be 1 to 512 printable ASCII characters without spaces (it is sent as an HTTP header)");
  }
  if (input.shareUrl !== "") {
    // The URL's own problems come before its host's, whatever the guard allows.
    const problem = checkWebhookUrl(input.shareUrl, { allowPrivate: true });
    if (problem && MALFORMED_URL_PROBLEMS.has(problem.code)) problems.push(`the URL is refused: ${problem.message}`);
  }
  return problems;
}

/**
 * Why a membership of an account's environment cannot be saved; empty when it can: what is wrong with its input
 * ({@link malformedMembership}), then what the installation refuses. The share URL passes the webhook guard as a
 * webhook's does when saved, its host name resolved.
 */
export async function membershipProblems(input: MembershipInput, environment: Environment, guard: GuardOptions, resolve?: Resolver): Promise<string[]> {
  const problems = malformedMembership(input);
  const crossed = crossedEnvironment(input.shareToken, environment);
  if (crossed) problems.push(crossed);
  if (input.shareUrl !== "") {
    const problem = await checkWebhookDestination(input.shareUrl, guard, resolve);
    // One the URL's text shows is named above already.
    if (problem && !MALFORMED_URL_PROBLEMS.has(problem.code)) problems.push(`the URL is refused: ${problem.message}`);
  }
  return problems;
}

/**
 * Why a share token cannot carry an environment's labels; undefined when it can. The hub files what it
 * receives under the environment of the key it receives it with: a test account sharing with a live key
 * would put its test labels into the live consortium, and the reverse.
 */
export function crossedEnvironment(shareToken: string, environment: Environment): string | undefined {
  const tokenEnvironment = parseKeyShape(shareToken)?.environment;
  if (tokenEnvironment === undefined || tokenEnvironment === environment) return undefined;
  return `the token is a ${tokenEnvironment} key: the ${environment} environment shares with a ${environment} key only`;
}

/** Saves or removes an account's consortium membership with its audit entry (never the key or token). */
export class ConsortiumMembership {
  constructor(
    private readonly repository: ConsortiumRepository,
    private readonly audit: AuditTrail,
    private readonly clock: Clock,
  ) {}

  set(tenant: Tenant, actor: AuditActor, input: MembershipInput): void {
    this.audit.atomically(() => {
      this.repository.putSettings(tenant, input, this.clock.now());
      this.audit.record({ ...tenant, actor, action: "consortium.updated", data: { member: true, sharing: input.shareUrl !== "", shareUrl: input.shareUrl } });
    });
  }

  disable(tenant: Tenant, actor: AuditActor): boolean {
    return this.audit.atomically(() => {
      const removed = this.repository.deleteSettings(tenant);
      if (removed) this.audit.record({ ...tenant, actor, action: "consortium.updated", data: { member: false, sharing: false, shareUrl: "" } });
      return removed;
    });
  }
}
