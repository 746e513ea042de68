import { ScalarType, getOption, hasOption, type DescMethod, type DescService } from "@bufbuild/protobuf";
import { CaseService } from "../../gen/fraud/v1/case_pb.js";
import { ConsortiumService } from "../../gen/fraud/v1/consortium_pb.js";
import { DecisionService } from "../../gen/fraud/v1/decision_pb.js";
import { FeedbackService } from "../../gen/fraud/v1/feedback_pb.js";
import {
  ResponseShape,
  access,
  http,
  rate_limit,
  type AccessRule,
  type HttpRule,
  type RateLimitRule,
} from "../../gen/fraud/v1/options_pb.js";
import { ListService } from "../../gen/fraud/v1/list_pb.js";
import { PolicyService } from "../../gen/fraud/v1/policy_pb.js";
import { StatusService } from "../../gen/fraud/v1/status_pb.js";
import { WebhookService } from "../../gen/fraud/v1/webhook_pb.js";
import { AuditService } from "../../gen/fraud/v1/audit_pb.js";
import { DeadLetterService } from "../../gen/fraud/v1/dead_letter_pb.js";
import { isPermission, type Permission } from "../auth/keys.js";

/** How every JSON answer is written (Connect JSON, REST, fraudctl --json): fields at their default value included. */
export const JSON_WRITE_OPTIONS = { alwaysEmitImplicit: true } as const;

/** Every service of the public API, in the order they are documented. */
export const API_SERVICES: readonly DescService[] = [
  DecisionService,
  FeedbackService,
  CaseService,
  PolicyService,
  ListService,
  WebhookService,
  DeadLetterService,
  AuditService,
  StatusService,
  ConsortiumService,
];

/** The options of one RPC, read once from its descriptor. */
export interface MethodContract {
  method: DescMethod;
  http: HttpRule;
  access: AccessRule;
  /** access.permission, checked against the known permissions at start-up. */
  permission: Permission;
  /** Every permission the calling key must hold: access.permission, then access.also_requires. */
  permissions: Permission[];
  rateLimits: RateLimitRule[];
  responseShape: ResponseShape;
  /** The output's property named by http.created_field, checked to be a bool at start-up; undefined when none. */
  createdProperty: string | undefined;
}

const contracts = new Map<DescMethod, MethodContract>();

/**
 * Refuses limits declared on several RPCs under one name (the limiter counts them in one window, as
 * policy_compiles is) that say different things: which RPC's limit applied would depend on the call.
 */
export function checkSharedRateLimits(declared: Iterable<{ rpc: string; rule: RateLimitRule }>): void {
  const byName = new Map<string, { rpc: string; rule: RateLimitRule }>();
  for (const entry of declared) {
    const first = byName.get(entry.rule.name);
    if (!first) {
      byName.set(entry.rule.name, entry);
      continue;
    }
    const [a, b] = [first.rule, entry.rule];
    if (a.scope !== b.scope || a.limit !== b.limit || a.windowSeconds !== b.windowSeconds || a.countsRefused !== b.countsRefused) {
      throw new Error(`rate limit ${entry.rule.name} is declared differently on ${first.rpc} and ${entry.rpc}`);
    }
  }
}

for (const service of API_SERVICES) {
  for (const method of service.methods) {
    // Fail at start-up, not at request time, if an RPC forgot its contract.
    if (!hasOption(method, http) || !hasOption(method, access)) {
      throw new Error(`${service.typeName}.${method.name} must declare (fraud.v1.http) and (fraud.v1.access)`);
    }
    const httpRule = getOption(method, http);
    const accessRule = getOption(method, access);
    const [permission, ...alsoRequired] = [accessRule.permission, ...accessRule.alsoRequires].map((name) => {
      if (!isPermission(name)) throw new Error(`${service.typeName}.${method.name} names an unknown permission ${name}`);
      return name;
    });
    if (permission === undefined) throw new Error(`${service.typeName}.${method.name} names no permission`);
    const createdField = httpRule.createdField === "" ? undefined : method.output.fields.find((f) => f.jsonName === httpRule.createdField);
    if (httpRule.createdField !== "" && (createdField?.fieldKind !== "scalar" || createdField.scalar !== ScalarType.BOOL)) {
      throw new Error(`${service.typeName}.${method.name}: created_field ${httpRule.createdField} is not a bool field of ${method.output.typeName}`);
    }
    contracts.set(method, {
      method,
      http: httpRule,
      access: accessRule,
      permission,
      permissions: [permission, ...alsoRequired],
      rateLimits: getOption(method, rate_limit),
      responseShape:
        httpRule.responseShape === ResponseShape.UNSPECIFIED ? ResponseShape.ENVELOPE : httpRule.responseShape,
      createdProperty: createdField?.localName,
    });
  }
}

checkSharedRateLimits([...contracts.values()].flatMap(({ method, rateLimits }) => rateLimits.map((rule) => ({ rpc: `${method.parent.typeName}.${method.name}`, rule }))));

/** The contract of a public API method; undefined for infrastructure services (reflection, health). */
export function contractOf(method: DescMethod): MethodContract | undefined {
  return contracts.get(method);
}

export function allContracts(): Iterable<MethodContract> {
  return contracts.values();
}
