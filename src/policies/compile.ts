// Turns a policy definition into planned CEL programs, once per version.
//
// Compilation is where mistakes are caught: a condition that does not parse,
// names an unknown variable or signal, or has the wrong type is refused here
// with the rule index and position, never at decision time.

import { CelScalar, celEnv, celFunc, celList, celMethod, listType, mapType, parse, plan, type CelList, type CelValue } from "@bufbuild/cel";
import { CheckError, checkCondition, literalsToDouble, subexpressions, type CheckedCondition, type Expr } from "./checker.js";
import { charge, chargeCopy, chargeLookup, chargeText, meteredEquals, meteredIn } from "./cost.js";
import { rewriteKeywords } from "./keywords.js";
import { shapeProblem } from "./shape.js";
import { codePoints } from "../code-points.js";
import { compiledPattern } from "./patterns.js";
import { POLICY_STATUSES, RULE_ACTIONS } from "./model.js";
import type {
  CompileResult,
  CompiledPolicy,
  CompiledRule,
  PolicyCompileError,
  PolicyDefinition,
  Program,
  RuleDefinition,
  SourcePosition,
} from "./model.js";

const { BOOL, DOUBLE, STRING, DYN } = CelScalar;

/** The longest string a rule may build with `+`: longer than anything it reads (metadata strings hold 1,024). */
export const MAX_BUILT_STRING = 4_096;
/** The longest list a rule may build with `+`. */
export const MAX_BUILT_LIST = 1_000;
const LIST = listType(DYN);
/** The function meterLoops() wraps loop conditions in. */
const LOOP_STEP = "@loop_step";
const MAP = mapType(DYN, DYN);

/**
 * One environment for every program. The overrides keep numbers doubles
 * throughout (size() would otherwise return a CEL int that cannot be added
 * to a double) and make division by zero an error, as in CEL's integer
 * division, instead of an Infinity that would satisfy `> 3`. Every operation
 * whose work grows with the data it is given counts that work (cost.ts).
 */
const ENV = celEnv({
  funcs: [
    celFunc("_/_", [DOUBLE, DOUBLE], DOUBLE, (dividend, divisor) => {
      if (divisor === 0) throw new Error("division by zero");
      return dividend / divisor;
    }),
    celFunc("_==_", [DYN, DYN], BOOL, meteredEquals),
    celFunc("_!=_", [DYN, DYN], BOOL, (left, right) => !meteredEquals(left, right)),
    celFunc("@in", [DYN, LIST], BOOL, meteredIn),
    celFunc("@in", [STRING, MAP], BOOL, (key, map) => {
      chargeLookup(key);
      return map.has(key);
    }),
    // Loops that build strings or lists could otherwise grow them without bound from a short condition
    // (three chained map()s each joining a hundred copies: gigabytes, and the process out of memory).
    celFunc("_+_", [STRING, STRING], STRING, (left, right) => {
      if (left.length + right.length > MAX_BUILT_STRING) throw new Error(`a string built by the rule would pass ${MAX_BUILT_STRING} characters`);
      const joined = left + right;
      chargeText(joined);
      return joined;
    }),
    // Copied into a flat list: CEL's own concatenation nests, and map() and filter() build
    // their results one item at a time, so reading a list a loop built went through a generator per item
    // added before it. A loop that builds an n-item list still copies about n²/2 items, and is charged for it.
    celFunc("_+_", [LIST, LIST], LIST, (left, right) => {
      if (left.size + right.size > MAX_BUILT_LIST) throw new Error(`a list built by the rule would pass ${MAX_BUILT_LIST} items`);
      chargeCopy(left.size + right.size);
      return celList(joinLists(left, right));
    }),
    celFunc("size", [STRING], DOUBLE, (text) => {
      chargeText(text);
      return codePoints(text);
    }),
    celFunc("size", [LIST], DOUBLE, (list) => list.size),
    celFunc("size", [MAP], DOUBLE, (map) => map.size),
    celMethod("size", STRING, [], DOUBLE, function () {
      chargeText(this);
      return codePoints(this);
    }),
    celMethod("size", LIST, [], DOUBLE, function () {
      return this.size;
    }),
    celMethod("size", MAP, [], DOUBLE, function () {
      return this.size;
    }),
    celMethod("contains", STRING, [STRING], BOOL, function (part) {
      chargeText(this);
      return this.includes(part);
    }),
    celMethod("startsWith", STRING, [STRING], BOOL, function (part) {
      chargeText(part);
      return this.startsWith(part);
    }),
    celMethod("endsWith", STRING, [STRING], BOOL, function (part) {
      chargeText(part);
      return this.endsWith(part);
    }),
    // CEL's own matches() compiles its pattern on every call; rules run on every decision. RE2's time is the
    // text's length times the pattern's size (at most 100 instructions, checker.ts).
    celMethod("matches", STRING, [STRING], BOOL, function (pattern) {
      const compiled = compiledPattern(pattern);
      charge(1 + Math.floor((this.length * compiled.re2Input.prog.numInst()) / 256));
      return compiled.test(this);
    }),
    // Wrapped around every loop's condition by meterLoops(): an iteration costs its expression's nodes.
    celFunc(LOOP_STEP, [BOOL, DOUBLE], BOOL, (condition, nodes) => {
      charge(nodes);
      return condition;
    }),
  ],
});

/** The items of two lists in one array; get() by index costs a tenth of spreading CEL's list iterators. */
function joinLists(left: CelList, right: CelList): CelValue[] {
  const items = new Array<CelValue>(left.size + right.size);
  for (let i = 0; i < left.size; i++) items[i] = left.get(i) as CelValue;
  for (let i = 0; i < right.size; i++) items[left.size + i] = right.get(i) as CelValue;
  return items;
}

/**
 * Wraps each loop's condition (all, exists, exists_one, map, filter) in a call that counts, at every
 * iteration, the nodes of the expressions the iteration evaluates. The call's name cannot be written in a
 * condition: the checker, which runs first, knows no such function.
 */
function meterLoops(expr: Expr): void {
  let nextId = maxId(expr) + 1n;
  const visit = (node: Expr): void => {
    subexpressions(node).forEach(visit);
    if (node.exprKind.case !== "comprehensionExpr") return;
    const loop = node.exprKind.value;
    if (loop.loopCondition === undefined || loop.loopStep === undefined) return;
    const nodes: Expr = {
      $typeName: "cel.expr.Expr",
      id: nextId++,
      exprKind: { case: "constExpr", value: { $typeName: "cel.expr.Constant", constantKind: { case: "doubleValue", value: 1 + countNodes(loop.loopCondition) + countNodes(loop.loopStep) } } },
    };
    loop.loopCondition = {
      $typeName: "cel.expr.Expr",
      id: nextId++,
      exprKind: { case: "callExpr", value: { $typeName: "cel.expr.Expr.Call", function: LOOP_STEP, args: [loop.loopCondition, nodes] } },
    };
  };
  visit(expr);
}

function countNodes(node: Expr): number {
  return subexpressions(node).reduce((sum, child) => sum + countNodes(child), 1);
}

function maxId(node: Expr): bigint {
  return subexpressions(node).reduce((max, child) => {
    const id = maxId(child);
    return id > max ? id : max;
  }, node.id);
}

/** Compiles without the cache. Prefer compilePolicy, which reuses programs per (id, version). */
export function compilePolicyUncached(definition: PolicyDefinition): CompileResult {
  const errors: PolicyCompileError[] = [];
  const status = POLICY_STATUSES.find((known) => known === definition.status);
  if (status === undefined) {
    errors.push({ ruleIndex: -1, field: "status", position: null, message: `unknown status '${definition.status}'` });
  }
  const rules: CompiledRule[] = [];
  definition.rules.forEach((rule, index) => {
    const compiled = compileRule(rule, index);
    if (Array.isArray(compiled)) errors.push(...compiled);
    else rules.push(compiled);
  });
  if (errors.length > 0 || status === undefined) return { ok: false, errors };
  const { createdAt } = definition;
  const policy: CompiledPolicy = {
    id: definition.id,
    version: definition.version,
    status,
    priority: definition.priority,
    actions: new Set(definition.actions),
    builtIn: definition.builtIn ?? false,
    createdAtMs: createdAt === undefined ? null : Number(createdAt.seconds) * 1000 + createdAt.nanos / 1e6,
    rules,
  };
  return { ok: true, policy };
}

/** A rule's problems are all reported at once: an unknown action and a bad condition. */
function compileRule(rule: RuleDefinition, index: number): CompiledRule | PolicyCompileError[] {
  const errors: PolicyCompileError[] = [];
  const action = RULE_ACTIONS.find((known) => known === rule.action);
  if (action === undefined) {
    errors.push({ ruleIndex: index, field: "action", position: null, message: `unknown action '${rule.action}'` });
  }
  const condition = compileCondition(rule.condition);
  if ("message" in condition) {
    const { offset } = condition;
    const position = offset === null ? null : positionAt(rule.condition, skipSpace(rule.condition, offset));
    errors.push({ ruleIndex: index, field: "condition", position, message: condition.message });
  }
  if (action === undefined || "message" in condition) return errors;
  return { index, condition: rule.condition, action, description: rule.description ?? "", ...condition };
}

function compileCondition(
  source: string,
): ({ program: Program } & CheckedCondition) | { message: string; offset: number | null } {
  // Same-length keyword replacement: parser offsets are offsets into `source`.
  const rewritten = rewriteKeywords(source);
  // Before parsing: what the limits refuse would cost the parser and planner more than it may.
  const tooCostly = shapeProblem(rewritten);
  if (tooCostly !== null) return tooCostly;
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(rewritten);
  } catch (error) {
    const { message, offset } = describeParseError(error);
    return { message: `syntax error: ${message}`, offset };
  }
  let checked: CheckedCondition;
  try {
    literalsToDouble(parsed.expr);
    checked = checkCondition(parsed.expr);
  } catch (error) {
    // The AST walks recurse: thousands of chained operators exhaust the stack, as nesting does the parser's.
    if (error instanceof RangeError) return { message: "the condition is nested too deeply", offset: null };
    if (!(error instanceof CheckError)) throw error;
    const offset = parsed.sourceInfo?.positions[error.exprId.toString()];
    return { message: error.message, offset: offset === undefined ? 0 : offset + error.offsetShift };
  }
  meterLoops(parsed.expr);
  try {
    return { program: plan(ENV, parsed), ...checked };
  } catch (error) {
    return { message: error instanceof Error ? error.message : String(error), offset: null };
  }
}

/** The parser throws a peggy-style error with the bare message and a location. */
function describeParseError(error: unknown): { message: string; offset: number | null } {
  if (!(error instanceof Error)) return { message: String(error), offset: null };
  // The recursive-descent parser runs out of stack on thousands of nested parentheses; brackets are limited
  // before it runs (shape.ts), and this guards whatever else of its grammar recurses.
  if (isStackOverflow(error)) return { message: "the condition is nested too deeply", offset: null };
  // Its string literals decode escapes with String.fromCodePoint, which throws a RangeError of its own on a
  // bad one ('\x', '\u', '\U0011FFFF'): a mistake in the literal, not nesting.
  if (error instanceof RangeError) return { message: `invalid escape sequence in a string literal (${error.message})`, offset: null };
  const raw = "rawMessage" in error && typeof error.rawMessage === "string" ? error.rawMessage : error.message;
  const location = "location" in error ? error.location : undefined;
  const start =
    typeof location === "object" && location !== null && "start" in location ? location.start : undefined;
  const offset =
    typeof start === "object" && start !== null && "offset" in start && typeof start.offset === "number"
      ? start.offset
      : null;
  return { message: raw, offset };
}

/** The RangeError V8 throws when the stack runs out, rather than one a function threw for a bad argument. */
function isStackOverflow(error: unknown): boolean {
  return error instanceof RangeError && /call stack/i.test(error.message);
}

/** The parser places some operators on the blank before them; point at the operator itself. */
function skipSpace(text: string, offset: number): number {
  let index = offset;
  while (index < text.length && /\s/.test(text.charAt(index))) index++;
  return index;
}

function positionAt(text: string, offset: number): SourcePosition {
  const before = text.slice(0, offset);
  const lineStart = before.lastIndexOf("\n") + 1;
  return { offset, line: before.split("\n").length, column: offset - lineStart + 1 };
}

/** "rule 2 at 1:18: signals.network has no field 'torr'" */
export function formatCompileError(error: PolicyCompileError): string {
  const where = error.ruleIndex === -1 ? "policy" : `rule ${error.ruleIndex}`;
  const at = error.position === null ? "" : ` at ${error.position.line}:${error.position.column}`;
  return `${where}${at}: ${error.message}`;
}

/**
 * Compiled policies by (id, version). A version identifies the content, but
 * the content is compared too, so a caller that edits a policy without
 * bumping its version gets a fresh compile instead of stale programs.
 * Bounded so old versions do not pile up; the least recently used go first.
 */
export class PolicyCache {
  private readonly entries = new Map<string, { readonly fingerprint: string; readonly policy: CompiledPolicy }>();

  constructor(private readonly maxEntries = 1000) {}

  get size(): number {
    return this.entries.size;
  }

  compile(definition: PolicyDefinition): CompileResult {
    const key = `${definition.id}\u0000${definition.version}`;
    const fingerprint = fingerprintOf(definition);
    const cached = this.entries.get(key);
    if (cached !== undefined && cached.fingerprint === fingerprint) {
      this.entries.delete(key);
      this.entries.set(key, cached);
      return { ok: true, policy: cached.policy };
    }
    const result = compilePolicyUncached(definition);
    if (result.ok) {
      this.entries.delete(key);
      this.entries.set(key, { fingerprint, policy: result.policy });
      for (const oldest of this.entries.keys()) {
        if (this.entries.size <= this.maxEntries) break;
        this.entries.delete(oldest);
      }
    }
    return result;
  }
}

function fingerprintOf(definition: PolicyDefinition): string {
  return JSON.stringify([
    definition.status,
    definition.priority,
    definition.actions,
    definition.builtIn ?? false,
    definition.createdAt === undefined ? null : [String(definition.createdAt.seconds), definition.createdAt.nanos],
    definition.rules.map((rule) => [rule.condition, rule.action, rule.description ?? ""]),
  ]);
}

const SHARED_CACHE = new PolicyCache();

/** Compiles a policy, reusing the programs of an earlier compile of the same (id, version). */
export function compilePolicy(definition: PolicyDefinition): CompileResult {
  return SHARED_CACHE.compile(definition);
}
