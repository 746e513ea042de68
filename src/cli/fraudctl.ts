import type { KeyObject } from "node:crypto";
import { lookup } from "node:dns/promises";
import fs from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import v8 from "node:v8";
import { create, getOption, toJson } from "@bufbuild/protobuf";
import type { AuditActor } from "../audit/entry.js";
import { AuditLog } from "../audit/log.js";
import { AuditSigner, MissingAuditKeyError, importPublicKeyPem, publicKeyFingerprint } from "../audit/signer.js";
import { verifyPolicies } from "../audit/policies.js";
import { verifyChain } from "../audit/verify.js";
import { KeyError, KeyService } from "../auth/key-service.js";
import { ALL_PERMISSIONS, PUBLISHABLE_PERMISSIONS, isPermission, shownPermissions, type KeyKind, type Permission } from "../auth/keys.js";
import { systemClock, type Clock } from "../clock.js";
import { loadConfig, parseDecimalInteger } from "../config.js";
import { keyHint, silentLogger } from "../log.js";
import { ReferenceData } from "../engine/index.js";
import { buildApp } from "../server/app.js";
import { AccountRepository, type Account } from "../store/accounts.js";
import type { ApiKeyRecord } from "../store/api-keys.js";
import { ApiKeyRepository } from "../store/api-keys.js";
import { SqliteAuditStore } from "../store/audit.js";
import { DATABASE_FILE, openDatabase, type Db } from "../store/database.js";
import { PolicyRepository } from "../store/policies.js";
import type { Tenant } from "../store/tenant.js";
import { Outbox } from "../outbox/outbox.js";
import { ConsortiumMembership, malformedMembership, membershipProblems } from "../consortium/membership.js";
import { ConsortiumRepository } from "../store/consortium.js";
import { ListDeadLettersRequestSchema, ListDeadLettersResponseSchema, ReplayDeadLetterRequestSchema } from "../../gen/fraud/v1/dead_letter_pb.js";
import { validate } from "../../gen/fraud/v1/options_pb.js";
import { JSON_WRITE_OPTIONS } from "../api/contract.js";
import { NOT_IN_A_LINE, fieldProblems } from "../api/validation.js";
import { CreatePolicyRequestSchema } from "../../gen/fraud/v1/policy_pb.js";
import { DEFAULT_DEAD_LETTER_PAGE, taskIdOf, toDeadLetter } from "../services/dead-letters.js";

/** Where the CLI writes; tests pass their own. */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
}

/**
 * Each command's usage as the usage text lists it, its words first: `fraudctl keys create --help` prints the
 * entries of `keys create`, `fraudctl keys --help` those of `keys`.
 */
const COMMAND_USAGE = [
  `  fraudctl serve`,
  `  fraudctl reference build              compile the reference tables' snapshot
                                        (npm ci does; FRAUD_REFERENCE_SNAPSHOT_DIR)`,
  `  fraudctl accounts create --name NAME [--decide-rate-limit N] [--json]`,
  `  fraudctl accounts list [--json]`,
  `  fraudctl keys list [--account ID] [--json]`,
  `  fraudctl keys create --account ID --env test|live --type publishable|secret
                       [--permissions p1,p2] [--name NAME] [--json]`,
  `  fraudctl keys rotate KEY [--json]     KEY is the key itself or its id (key_...)`,
  `  fraudctl keys revoke KEY [--json]`,
  `  fraudctl audit verify [--public-key FILE] [--expected-head SEQ:HASH] [--json]
                        exit code 1 when the chain is broken, or a stored policy
                        differs from what the log recorded of it`,
  `  fraudctl audit export-key             the audit log's Ed25519 public key (PEM)`,
  `  fraudctl dlq list --account ID --env test|live [--limit N] [--offset N] [--json]`,
  `  fraudctl dlq replay ID --account ID --env test|live    ID is dlq_...`,
  `  fraudctl consortium set --account ID --env test|live --key KEY [--url URL --token TOKEN]
                        join a consortium: KEY is the consortium-wide secret (32+
                        characters); with URL (the hub's ingest endpoint) and TOKEN
                        (this member's credential there) the account also shares
                        its fraud labels`,
  `  fraudctl consortium show --account ID --env test|live [--json]`,
  `  fraudctl consortium disable --account ID --env test|live`,
];

const USAGE = `fraudctl — run and administer the fraud decision service

Usage:
${COMMAND_USAGE.join("\n")}
  fraudctl [COMMAND] --help             this text, or the command's part of it

Exit codes: 0 done; 1 refused or failed (what it names does not exist or cannot be
done, no database, a broken audit chain); 2 a wrong command line.

Environment: FRAUD_DATA_DIR (default ./data), PORT (8080), HOST (0.0.0.0).
`;

/**
 * The usage of the command the words name (`keys create`), else of their group (`keys`), else the whole
 * text: `keys explode --help` still shows what `keys` takes.
 */
function usageOf(words: readonly string[]): string {
  for (const count of [2, 1]) {
    if (words.length < count) continue;
    const named = words.slice(0, count).join(" ");
    const entries = COMMAND_USAGE.filter((entry) => entry.trim().split(/\s+/).slice(1, 1 + count).join(" ") === named);
    if (entries.length > 0) return `Usage:\n${entries.join("\n")}\n`;
  }
  return USAGE;
}

/** The command line itself is wrong: exit code 2, with the usage text. */
class UsageError extends Error {}

/** The command line is right, but what it names does not exist or cannot be done: exit code 1, as a broken audit chain is. */
class Refusal extends Error {}

/** The prefix of an account's id (ids.ts). */
const ACCOUNT_ID_PREFIXES = ["acct_"];
/** What `keys rotate` and `revoke` take: a key's id (ids.ts), or the key itself (keys.ts). */
const KEY_PREFIXES = ["key_", "sk_", "pk_"];
/** The prefix the API's ReplayDeadLetterRequest declares of a dead letter's id. */
const DEAD_LETTER_ID_PREFIXES = getOption(ReplayDeadLetterRequestSchema.field.id, validate).prefix;

/**
 * An argument that names something by its id, which starts with its kind's prefix: without it the argument can
 * name nothing, and is a mistyped command line (exit 2), as the API answers such an id 400; `acct_nope` is an
 * account that does not exist (exit 1).
 */
function checkIdPrefix(name: string, value: string, prefixes: readonly string[]): void {
  if (!prefixes.some((prefix) => value.startsWith(prefix))) throw new UsageError(`${name} must start with ${prefixes.join(" or ")}, got "${value}"`);
}

/** The account and environment a command works on: --account, which must exist (a typo must not act on, or list, nothing in silence), and --env. */
function tenantOption(command: string, values: { account?: string | undefined; env?: string | undefined }, accounts: AccountRepository): Tenant {
  if (!values.account) throw new UsageError(`${command} needs --account`);
  checkIdPrefix("--account", values.account, ACCOUNT_ID_PREFIXES);
  if (values.env !== "test" && values.env !== "live") throw new UsageError("--env must be test or live");
  if (!accounts.get(values.account)) throw new Refusal(`no account ${values.account}`);
  return { accountId: values.account, environment: values.env };
}

export async function runCli(argv: string[], io: CliIo, env: NodeJS.ProcessEnv = process.env, clock: Clock = systemClock): Promise<number> {
  const [group, action, ...rest] = argv;
  // A request for help wherever it is typed, before anything runs: `keys create ... --help` must neither create
  // a key nor be refused for an option the command does not take.
  if (group === "help" || argv.includes("--help") || argv.includes("-h")) {
    // The command is named by the words before the first option (`help keys create`, `keys create --help`).
    const words = group === "help" ? argv.slice(1) : argv;
    const firstOption = words.findIndex((word) => word.startsWith("-"));
    io.out(usageOf(firstOption === -1 ? words : words.slice(0, firstOption)));
    return 0;
  }
  try {
    if (group === "serve") {
      // Its settings come from the environment: an option here (`--port`) would otherwise be ignored in silence.
      if (action !== undefined) throw new UsageError(`serve takes no arguments, got ${action}: it reads PORT, HOST, FRAUD_DATA_DIR and the other settings from the environment`);
      return await serve(io, env);
    }
    if (group === "reference") {
      if (rest.length > 0) throw new UsageError(`reference ${action ?? ""} takes no arguments, got ${rest.join(" ")}`);
      return referenceCommand(action, io, env);
    }
    // No command at all is a wrong command line (help was asked for above).
    if (group === undefined) {
      io.out(USAGE);
      return 2;
    }
    const command = parseCommand(group, action);
    const config = loadConfig(env);
    // Only a new account may start a data directory, and only once its arguments are right: anything else
    // run against a missing one is a wrong FRAUD_DATA_DIR, and creating an empty database and signing key
    // there would answer it misleadingly (`audit verify` reporting an intact log of 0 entries).
    const startsAccount = command.group === "accounts" && command.action === "create";
    if (startsAccount) accountCreation(rest);
    const databasePath = path.join(config.dataDir, DATABASE_FILE);
    if (!startsAccount && !fs.existsSync(databasePath)) {
      throw new Refusal(`no database at ${databasePath}: set FRAUD_DATA_DIR to the service's data directory`);
    }
    const db = openDatabase(config.dataDir);
    try {
      const accounts = new AccountRepository(db);
      const auditStore = new SqliteAuditStore(db);
      // The key is loaded when a command first signs or shows it: listing keys needs none, and `audit verify
      // --public-key` checks a log whose private key is not here.
      let loaded: AuditSigner | undefined;
      const signer = (): AuditSigner => {
        try {
          loaded ??= AuditSigner.forLog(config.dataDir, auditStore.isEmpty());
          return loaded;
        } catch (error) {
          if (error instanceof MissingAuditKeyError) throw new Refusal(error.message);
          throw error;
        }
      };
      const audit = new AuditLog(auditStore, { sign: (hashHex) => signer().sign(hashHex) }, clock);
      const keys = new KeyService(accounts, new ApiKeyRepository(db), clock, audit, cliActor(env));
      switch (command.group) {
        case "accounts":
          return accountsCommand(command.action, rest, accounts, keys, io);
        case "keys":
          return keysCommand(command.action, rest, keys, accounts, io);
        case "audit":
          return auditCommand(command.action, rest, auditStore, new PolicyRepository(db), signer, io);
        case "dlq":
          return dlqCommand(command.action, rest, db, accounts, clock, io);
        case "consortium":
          return await consortiumCommand(command.action, rest, new ConsortiumRepository(db), accounts, audit, clock, config.webhookAllowPrivate, cliActor(env), io);
      }
    } finally {
      db.close();
    }
  } catch (error) {
    // parseArgs reports a malformed command line as a TypeError with a code (ERR_PARSE_ARGS_...).
    if (error instanceof UsageError || (error instanceof TypeError && "code" in error)) {
      io.err(`fraudctl: ${error.message}\n`);
      io.err(USAGE);
      return 2;
    }
    if (error instanceof Refusal || error instanceof KeyError) {
      io.err(`fraudctl: ${error.message}\n`);
      return 1;
    }
    throw error;
  }
}

function referenceCommand(action: string | undefined, io: CliIo, env: NodeJS.ProcessEnv): number {
  if (action !== "build") throw new UsageError("reference takes: build");
  const started = performance.now();
  const { snapshotError } = ReferenceData.build({ snapshotDir: loadConfig(env).referenceSnapshotDir });
  if (snapshotError !== undefined) {
    io.err(`fraudctl: built the reference tables but could not write their snapshot: ${snapshotError}\n`);
    return 1;
  }
  io.out(`reference tables built and snapshot written in ${Math.round(performance.now() - started)} ms\n`);
  return 0;
}

/**
 * The commands after `serve`, `reference` and `help`, by group: all of them work on an existing database.
 * Checked before anything is opened; each group's handler takes exactly its actions (the compiler holds the
 * two together).
 */
const COMMANDS = {
  accounts: ["create", "list"],
  keys: ["list", "create", "rotate", "revoke"],
  audit: ["verify", "export-key"],
  dlq: ["list", "replay"],
  consortium: ["set", "show", "disable"],
} as const;
type Group = keyof typeof COMMANDS;
type Action<G extends Group> = (typeof COMMANDS)[G][number];

type Command = { [G in Group]: { group: G; action: Action<G> } }[Group];

/** The command named on the command line, or a usage error. */
function parseCommand(group: string, action: string | undefined): Command {
  if (!Object.hasOwn(COMMANDS, group)) throw new UsageError(`unknown command ${group}`);
  const actions: readonly string[] = COMMANDS[group as Group];
  if (action === undefined || !actions.includes(action)) throw new UsageError(`unknown ${group} command ${action ?? ""}`.trim());
  // Checked against the table just above.
  return { group, action } as Command;
}

/** The end of a handler that took every action of its group: a new action in COMMANDS fails to compile here. */
function handled(action: never): never {
  throw new Error(`unhandled command ${String(action)}`);
}

/**
 * A name given to an account or a key, held to the rules of a policy's name (CreatePolicyRequest.name): one
 * line, so that no name can forge a row of a listing or send a terminal escape, and at most 200 characters.
 */
function checkName(value: string): void {
  const problems = fieldProblems(CreatePolicyRequestSchema.field.name, value);
  if (problems.length > 0) throw new UsageError(`--name ${problems.join(", ")}`);
}

/**
 * A stored name as a listing prints it. One an earlier release let in with a line break or a control character
 * would forge a row, or reach the terminal as an escape: such a name is printed as a JSON string, those
 * characters escaped (`"Evil\nacct_..."`), where every other name is printed as it is.
 */
function shownName(name: string): string {
  if (!NOT_IN_A_LINE.test(name)) return name;
  // JSON.stringify escapes the C0 controls but leaves the C1 controls and the separators as they are.
  return JSON.stringify(name).replace(new RegExp(NOT_IN_A_LINE, "gu"), (character) => `\\u${character.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** `accounts create`'s arguments, checked (also before a new data directory is started for it). */
function accountCreation(args: string[]): { name: string; overrides: Record<string, number>; json: boolean } {
  const { values } = parseArgs({
    args,
    options: { name: { type: "string" }, "decide-rate-limit": { type: "string" }, json: { type: "boolean" } },
    strict: true,
  });
  if (!values.name) throw new UsageError("accounts create needs --name");
  checkName(values.name);
  const overrides: Record<string, number> = {};
  if (values["decide-rate-limit"] !== undefined) overrides.decide = wholeNumberOption("decide-rate-limit", values["decide-rate-limit"], 1, INT32_MAX);
  return { name: values.name, overrides, json: values.json ?? false };
}

/** A number option's value, read as the service's settings are (`1e300` would end up in headers as written). */
function wholeNumberOption(name: string, raw: string, min: number, max: number): number {
  const value = parseDecimalInteger(raw, min, max);
  if (value === undefined) throw new UsageError(`--${name} must be a whole number from ${min} to ${max} in decimal digits, got "${raw}"`);
  return value;
}

function accountsCommand(action: Action<"accounts">, args: string[], accounts: AccountRepository, keys: KeyService, io: CliIo): number {
  if (action === "create") {
    const values = accountCreation(args);
    const created = keys.createAccount(values.name, values.overrides);
    if (values.json) {
      io.out(JSON.stringify({ account: describeAccount(created.account), keys: created.keys }) + "\n");
    } else {
      io.out(`account ${created.account.id} (${created.account.name})\n`);
      for (const environment of ["test", "live"] as const) {
        io.out(`  ${environment} publishable: ${created.keys[environment].publishable}\n`);
        io.out(`  ${environment} secret:      ${created.keys[environment].secret}   (shown only once)\n`);
      }
    }
    return 0;
  }
  if (action === "list") {
    const { values } = parseArgs({ args, options: { json: { type: "boolean" } }, strict: true });
    const list = accounts.list().map(describeAccount);
    if (values.json) io.out(JSON.stringify({ accounts: list }) + "\n");
    else for (const account of list) io.out(`${account.id}  ${shownName(account.name)}\n`);
    return 0;
  }
  return handled(action);
}

function keysCommand(action: Action<"keys">, args: string[], keys: KeyService, accounts: AccountRepository, io: CliIo): number {
  if (action === "list") {
    const { values } = parseArgs({ args, options: { account: { type: "string" }, json: { type: "boolean" } }, strict: true });
    if (values.account !== undefined) checkIdPrefix("--account", values.account, ACCOUNT_ID_PREFIXES);
    const list = keys.list(values.account).map(describeKey);
    if (values.json) io.out(JSON.stringify({ keys: list }) + "\n");
    else for (const key of list) io.out(`${key.id}  ${key.accountId}  ${key.environment}  ${key.kind}  ${key.key}  ${key.status}\n`);
    return 0;
  }
  if (action === "create") {
    const { values } = parseArgs({
      args,
      options: {
        account: { type: "string" },
        env: { type: "string" },
        type: { type: "string" },
        permissions: { type: "string" },
        name: { type: "string" },
        json: { type: "boolean" },
      },
      strict: true,
    });
    // The command line is checked whole before what it names: a wrong one is exit 2 whatever the account.
    if (values.type !== "publishable" && values.type !== "secret") throw new UsageError("--type must be publishable or secret");
    // An empty name is none, as when --name is left out.
    if (values.name) checkName(values.name);
    let permissions: Permission[] | undefined;
    if (values.permissions !== undefined) {
      const requested = [...new Set(values.permissions.split(",").map((p) => p.trim()).filter(Boolean))];
      // A key that may do nothing is a mistake, not a request: leave --permissions out for all of them.
      if (requested.length === 0) throw new UsageError(`--permissions must name at least one of: ${ALL_PERMISSIONS.join(", ")}`);
      const unknown = requested.filter((p) => !isPermission(p));
      if (unknown.length > 0) throw new UsageError(`unknown permissions: ${unknown.join(", ")} (known: ${ALL_PERMISSIONS.join(", ")})`);
      permissions = requested as Permission[];
      const secretOnly = values.type === "publishable" ? permissions.filter((p) => !PUBLISHABLE_PERMISSIONS.includes(p)) : [];
      if (secretOnly.length > 0) {
        throw new UsageError(`publishable keys can only hold ${PUBLISHABLE_PERMISSIONS.join(", ")}; ${secretOnly.join(", ")} needs a secret key`);
      }
    }
    const { accountId, environment } = tenantOption("keys create", values, accounts);
    const issued = keys.issue({
      accountId,
      environment,
      kind: values.type as KeyKind,
      permissions,
      name: values.name,
    });
    printIssued(io, values.json === true, issued.key, issued.record);
    return 0;
  }
  if (action === "rotate" || action === "revoke") {
    const { values, positionals } = parseArgs({ args, options: { json: { type: "boolean" } }, allowPositionals: true, strict: true });
    const target = positionals[0];
    if (!target || positionals.length > 1) throw new UsageError(`keys ${action} takes exactly one KEY`);
    checkIdPrefix("KEY", target, KEY_PREFIXES);
    if (action === "rotate") {
      const issued = keys.rotate(target);
      printIssued(io, values.json === true, issued.key, issued.record, keys.find(target));
    } else {
      const revoked = keys.revoke(target);
      if (values.json) io.out(JSON.stringify({ revoked: describeKey(revoked) }) + "\n");
      else io.out(`revoked ${revoked.id} (${keyHint(revoked.last4)})\n`);
    }
    return 0;
  }
  return handled(action);
}

/** Who the audit log names for changes made from the command line. */
function cliActor(env: NodeJS.ProcessEnv): AuditActor {
  const user = env.USER || env.USERNAME;
  return user ? `cli:${user}` : "cli";
}

function auditCommand(action: Action<"audit">, args: string[], store: SqliteAuditStore, policies: PolicyRepository, signer: () => AuditSigner, io: CliIo): number {
  if (action === "export-key") {
    parseArgs({ args, options: {}, strict: true });
    io.out(signer().exportPublicKeyPem());
    return 0;
  }
  if (action === "verify") {
    const { values } = parseArgs({
      args,
      options: { "public-key": { type: "string" }, "expected-head": { type: "string" }, json: { type: "boolean" } },
      strict: true,
    });
    const keyFile = values["public-key"];
    const publicKey = keyFile === undefined ? signer().publicKey : publicKeyFile(keyFile);
    let expectedHead: { seq: number; hash: string } | undefined;
    if (values["expected-head"] !== undefined) {
      const match = /^([1-9][0-9]*):([0-9a-f]{64})$/.exec(values["expected-head"]);
      // A seq past 2^53 - 1 would be read as another number, and the log checked against a head nobody recorded.
      const seq = match ? parseDecimalInteger(match[1] as string, 1, Number.MAX_SAFE_INTEGER) : undefined;
      if (!match || seq === undefined) throw new UsageError("--expected-head must be SEQ:HASH, as printed by a previous verify");
      expectedHead = { seq, hash: match[2] as string };
    }
    // One read transaction: the chain, the policies and their entries as of one moment, so that a policy saved
    // while the command runs (its row and its entry commit together) is never seen half.
    const { result, policyProblems } = store.asOfOneMoment(() => {
      const result = verifyChain(store.entries(), publicKey, { expectedHead });
      // Only an intact chain vouches for the entries the stored policies are compared with.
      return { result, policyProblems: result.ok ? verifyPolicies(policies.all(), store.policyEntries()) : [] };
    });
    if (values.json) {
      io.out(JSON.stringify({ ...result, ok: result.ok && policyProblems.length === 0, policyProblems, publicKey: publicKeyFingerprint(publicKey) }) + "\n");
    } else if (result.firstProblem) {
      const problem = result.firstProblem;
      io.out(`audit log ${problem.kind.toUpperCase()} at seq ${problem.seq}${problem.id ? ` (entry ${problem.id})` : ""}: ${problem.message}\n`);
      io.out(`${result.checked} entries before it are intact\n`);
    } else {
      io.out(`audit log intact: ${result.checked} entries, signed by key ${publicKeyFingerprint(publicKey)}\n`);
      if (result.head) io.out(`head: ${result.head.seq}:${result.head.hash}  (pass it as --expected-head next time to detect a cut tail)\n`);
      for (const problem of policyProblems) {
        io.out(`policy ${problem.policyId} (account ${problem.accountId}, ${problem.environment}, version ${problem.version}) DOES NOT MATCH the audit log: ${problem.message}\n`);
      }
      if (policyProblems.length > 0) io.out(`${policyProblems.length} stored ${policyProblems.length === 1 ? "policy does" : "policies do"} not match the log: changed behind the service's back\n`);
    }
    return result.ok && policyProblems.length === 0 ? 0 : 1;
  }
  return handled(action);
}

/** The Ed25519 public key in a PEM file named on the command line; one that cannot be read or is no such key is a wrong argument. */
function publicKeyFile(file: string): KeyObject {
  let pem: string;
  try {
    pem = fs.readFileSync(file, "utf8");
  } catch (error) {
    throw new UsageError(`--public-key ${file} cannot be read: ${error instanceof Error ? error.message : String(error)}`);
  }
  try {
    return importPublicKeyPem(pem);
  } catch (error) {
    throw new UsageError(`--public-key ${file} is not an Ed25519 public key in PEM (as audit export-key writes): ${error instanceof Error ? error.message : String(error)}`);
  }
}

/** The largest int32, the type of the API's page parameters. */
const INT32_MAX = 2 ** 31 - 1;

/** The options each dlq action takes. */
const DLQ_OPTIONS: Record<Action<"dlq">, readonly string[]> = {
  list: ["account", "env", "limit", "offset", "json"],
  replay: ["account", "env"],
};

function dlqCommand(action: Action<"dlq">, args: string[], db: Db, accounts: AccountRepository, clock: Clock, io: CliIo): number {
  const { values, positionals } = parseArgs({
    args,
    options: {
      account: { type: "string" },
      env: { type: "string" },
      limit: { type: "string" },
      offset: { type: "string" },
      json: { type: "boolean" },
    },
    allowPositionals: true,
    strict: true,
  });
  if (action === "list" && positionals.length > 0) throw new UsageError(`dlq list takes no IDs, got ${positionals.join(" ")}`);
  // Paging and --json are list's: `replay --json` would otherwise print text in silence.
  const foreign = Object.keys(values).filter((name) => !DLQ_OPTIONS[action].includes(name));
  if (foreign.length > 0) throw new UsageError(`dlq ${action} does not take ${foreign.map((name) => `--${name}`).join(", ")}`);
  // The CLI only reads and re-queues rows: the server's runner carries the replayed tasks out.
  const outbox = new Outbox(db, clock, silentLogger);
  if (action === "replay") {
    const target = positionals[0];
    if (!target || positionals.length > 1) throw new UsageError("dlq replay takes exactly one ID");
    // The command line whole before what it names: a wrong one is exit 2 whatever the account.
    checkIdPrefix("ID", target, DEAD_LETTER_ID_PREFIXES);
    const tenant = tenantOption("dlq replay", values, accounts);
    const taskId = taskIdOf(target);
    if (taskId === undefined || !outbox.replay(tenant, taskId)) throw new Refusal(`no dead letter ${target} in ${tenant.accountId} (${tenant.environment})`);
    io.out(`${target} queued again\n`);
    return 0;
  }
  if (action === "list") {
    const tenant = tenantOption("dlq list", values, accounts);
    // The bounds the API's ListDeadLettersRequest declares (its validate options; an int32 at most).
    const count = (field: "limit" | "offset", fallback: number) => {
      const rules = getOption(ListDeadLettersRequestSchema.field[field], validate);
      const [min, max] = [rules.min ?? 0, rules.max ?? INT32_MAX];
      const raw = values[field];
      return raw === undefined ? fallback : wholeNumberOption(field, raw, min, max);
    };
    const found = outbox.deadLetters(tenant, count("limit", DEFAULT_DEAD_LETTER_PAGE), count("offset", 0));
    // The JSON the API answers (GET /api/v1/dead-letters), through the same mapping.
    const page = toJson(ListDeadLettersResponseSchema, create(ListDeadLettersResponseSchema, { deadLetters: found.map(toDeadLetter), count: found.length }), JSON_WRITE_OPTIONS) as {
      deadLetters: Array<{ id: string; kind: string; attempts: number; failedAt: string; lastError: string }>;
    };
    const letters = page.deadLetters;
    if (values.json) io.out(JSON.stringify(page) + "\n");
    else if (letters.length === 0) io.out(`no dead letters in ${tenant.accountId} (${tenant.environment})\n`);
    else for (const letter of letters) io.out(`${letter.id}  ${letter.kind}  ${letter.attempts} attempts  ${letter.failedAt}  ${letter.lastError}\n`);
    return 0;
  }
  return handled(action);
}

/** The options each consortium action takes. */
const CONSORTIUM_OPTIONS: Record<Action<"consortium">, readonly string[]> = {
  set: ["account", "env", "key", "url", "token"],
  show: ["account", "env", "json"],
  disable: ["account", "env"],
};

/** docs/feedback.md: an account's consortium membership. The key and token are never printed back. */
async function consortiumCommand(
  action: Action<"consortium">,
  args: string[],
  repository: ConsortiumRepository,
  accounts: AccountRepository,
  audit: AuditLog,
  clock: Clock,
  allowPrivate: boolean,
  actor: AuditActor,
  io: CliIo,
): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      account: { type: "string" },
      env: { type: "string" },
      key: { type: "string" },
      url: { type: "string" },
      token: { type: "string" },
      json: { type: "boolean" },
    },
    strict: true,
  });
  // Each action takes its own options: `show --key x` is a mistake, not a key set in silence.
  const foreign = Object.keys(values).filter((name) => !CONSORTIUM_OPTIONS[action].includes(name));
  if (foreign.length > 0) throw new UsageError(`consortium ${action} does not take ${foreign.map((name) => `--${name}`).join(", ")}`);
  const membership = new ConsortiumMembership(repository, audit, clock);
  if (action === "set") {
    if (values.key === undefined) throw new UsageError("consortium set needs --key KEY, the consortium-wide secret");
    const input = { key: values.key, shareUrl: values.url ?? "", shareToken: values.token ?? "" };
    // The command line whole before what it names: a wrong one (a key too short, --url without --token or the
    // reverse, a token no header carries, a URL that is none) is exit 2 whatever the account.
    const malformed = malformedMembership(input);
    if (malformed.length > 0) throw new UsageError(malformed.join("; "));
    const tenant = tenantOption("consortium set", values, accounts);
    const problems = await membershipProblems(input, tenant.environment, { allowPrivate });
    // Well-formed options whose values the service refuses (a private share URL, a host that does not resolve, a
    // token of the other environment): a refusal, exit 1, as the API's 400 would be, not a command line to
    // correct by its usage.
    if (problems.length > 0) throw new Refusal(problems.join("; "));
    membership.set(tenant, actor, input);
    io.out(`${tenant.accountId} (${tenant.environment}) is a consortium member${input.shareUrl ? `, sharing with ${input.shareUrl}` : ", not sharing"}\n`);
    return 0;
  }
  const tenant = tenantOption(`consortium ${action}`, values, accounts);
  if (action === "show") {
    const settings = repository.settings(tenant);
    const shown = { member: settings !== undefined, sharing: (settings?.shareUrl ?? "") !== "", shareUrl: settings?.shareUrl ?? "" };
    if (values.json) io.out(JSON.stringify(shown) + "\n");
    else io.out(shown.member ? `member; ${shown.sharing ? `sharing with ${shown.shareUrl}` : "not sharing"}\n` : "not a consortium member\n");
    return 0;
  }
  if (action === "disable") {
    io.out(membership.disable(tenant, actor) ? "consortium membership removed\n" : "was not a consortium member\n");
    return 0;
  }
  return handled(action);
}

function printIssued(io: CliIo, json: boolean, key: string, record: ApiKeyRecord, replaced?: ApiKeyRecord): void {
  const rotation = replaced && {
    replaces: replaced.id,
    oldKeyValidUntil: new Date(replaced.expiresAt ?? 0).toISOString(),
  };
  if (json) {
    // The fields keys list shows of it, with the key itself where the list has its last 4 characters.
    io.out(JSON.stringify({ ...describeKey(record), key, ...rotation }) + "\n");
    return;
  }
  io.out(`${record.id}: ${key}\n(shown only once; store it now)\n`);
  if (rotation) io.out(`the old key ${rotation.replaces} keeps working until ${rotation.oldKeyValidUntil}\n`);
}

/** An account as the CLI shows it, created or listed; times in ISO 8601, like keys' and the API's. */
function describeAccount(account: Account) {
  return { ...account, createdAt: new Date(account.createdAt).toISOString() };
}

/** A key as the CLI shows it: never the key itself, only its last 4 characters. */
function describeKey(record: ApiKeyRecord) {
  const now = Date.now();
  const status =
    record.revokedAt !== undefined
      ? "revoked"
      : record.expiresAt !== undefined
        ? record.expiresAt > now
          ? `rotated, valid until ${new Date(record.expiresAt).toISOString()}`
          : "expired"
        : "active";
  return {
    id: record.id,
    accountId: record.accountId,
    environment: record.environment,
    kind: record.kind,
    key: keyHint(record.last4),
    permissions: shownPermissions(record.kind, record.permissions),
    name: record.name,
    status,
    createdAt: new Date(record.createdAt).toISOString(),
  };
}

/** Where `serve` puts the demo account's test keys on first start (in the data directory, mode 0600). */
const DEMO_KEYS_FILE = "demo-keys.json";

/**
 * V8 lets a heap grow to several times what survived its last full
 * collection before collecting again. Under load the request thread's live
 * heap is about 20 MB while its garbage (requests promoted while in flight)
 * took it past 120 MB; doubling at most (instead of V8's default factor, up to
 * 4) keeps resident memory under 300 MB at no measurable cost in throughput
 * (docs/benchmarks.md). Process-wide: the worker threads, started after, too.
 */
const HEAP_GROWING_FLAG = "--heap-growing-percent=100";

async function serve(io: CliIo, env: NodeJS.ProcessEnv): Promise<number> {
  v8.setFlagsFromString(HEAP_GROWING_FLAG);
  const config = loadConfig(env);
  // A HOST that names no address fails here, as other bad settings do, before the data directory is touched.
  await lookup(config.host).catch((error: unknown) => {
    throw new Error(`HOST must be an address or a name that resolves, got "${config.host}" (${error instanceof Error ? error.message : String(error)})`);
  });
  const app = buildApp({ config });
  let address;
  try {
    address = await app.listen();
  } catch (error) {
    // The engine and writer threads are already running: without this the process would report the error and
    // stay up. The listen error is the one to report, whatever closing says.
    await app.close().catch(() => undefined);
    throw error;
  }
  if (config.seedDemoAccount && app.accounts.count() === 0) {
    const demo = app.keys.createAccount("Demo");
    // The keys go to a file only its owner can read, never to this output: a server's output ends up in logs,
    // where keys appear by their last 4 characters only.
    const keysFile = path.join(config.dataDir, DEMO_KEYS_FILE);
    const lines = ["", `  Empty data directory: created a demo account (${demo.account.id}).`];
    try {
      fs.writeFileSync(keysFile, `${JSON.stringify({ account: demo.account.id, test: demo.keys.test }, null, 2)}\n`, { mode: 0o600, flag: "wx" });
      lines.push(
        `  Its test keys (publishable ${keyHint(demo.keys.test.publishable)}, secret ${keyHint(demo.keys.test.secret)}) are in ${keysFile},`,
        "  readable by you only. Try it:",
        `  export FRAUD_SECRET_KEY=$(node -p "require('${keysFile}').test.secret")`,
        `  curl -s http://localhost:${address.port}/api/v1/decide -H "X-API-Key: $FRAUD_SECRET_KEY" \\`,
        `    -H 'Content-Type: application/json' -d '{"userId":"user_1","action":"login","ip":"81.2.69.160"}'`,
      );
    } catch (error) {
      lines.push(`  Could not write its keys to ${keysFile} (${error instanceof Error ? error.message : String(error)}); issue one with:`);
      lines.push(`  fraudctl keys create --account ${demo.account.id} --env test --type secret`);
    }
    lines.push("  Its live keys are in no file; to get one:", `  fraudctl keys create --account ${demo.account.id} --env live --type secret`, "");
    // On stderr, for the person who started it: standard output carries the JSON log lines alone, one per line.
    io.err(`${lines.join("\n")}\n`);
  }
  app.logger.log("info", "listening", { host: address.address, port: address.port, dataDir: config.dataDir });
  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      app.logger.log("info", "shutting down", { signal });
      void app.close().then(resolve);
    };
    process.once("SIGTERM", () => stop("SIGTERM"));
    process.once("SIGINT", () => stop("SIGINT"));
  });
  app.logger.log("info", "stopped", {});
  return 0;
}

/** Entry point of the `fraudctl` bin. */
export async function main(): Promise<void> {
  // A reader that stopped early (`fraudctl audit verify | head -1`) closes the pipe: what is left to print
  // has no reader, which is no failure of the command's. Output that cannot be written otherwise (a log file on
  // a full disk) is said once on stderr, and the exit code is 1 however the command ended; a server keeps
  // serving without its log lines rather than stop answering, its health saying whatever else the disk breaks.
  let outputLost = false;
  process.stdout.on("error", (error: NodeJS.ErrnoException) => {
    if (error.code === "EPIPE" || outputLost) return;
    outputLost = true;
    process.exitCode = 1;
    process.stderr.write(`fraudctl: cannot write to standard output (${error.message}); what is left to print is lost\n`);
  });
  const io: CliIo = { out: (t) => process.stdout.write(t), err: (t) => process.stderr.write(t) };
  let exitCode: number;
  try {
    exitCode = await runCli(process.argv.slice(2), io);
  } catch (error) {
    io.err(`fraudctl: ${error instanceof Error ? error.message : String(error)}\n`);
    exitCode = 1;
  }
  process.exitCode = outputLost ? Math.max(exitCode, 1) : exitCode;
}
