// Static checker for rule conditions over @bufbuild/cel's parsed AST.
//
// @bufbuild/cel evaluates dynamically: `signals.network.torr` or
// `score == "high"` only fail (or silently compare false) when a decision is
// made. Policies must be refused when they are saved instead, so this walks
// the AST once at compile time against the variable types in schema.ts and
// accepts only the operators and functions listed here.

import type { parse } from "@bufbuild/cel";
import { BOOL, DYN, NULL, NUMBER, STRING, VARIABLES, listOf, typeName } from "./schema.js";
import type { ValueType } from "./schema.js";
import { compiledPattern } from "./patterns.js";

export type Expr = ReturnType<typeof parse>["expr"];
type ExprKind<C extends Expr["exprKind"]["case"]> = Extract<Expr["exprKind"], { case: C }>["value"];
type Call = ExprKind<"callExpr">;
type Select = ExprKind<"selectExpr">;
type Comprehension = ExprKind<"comprehensionExpr">;

/** A refused condition: `exprId` locates it through the parser's source positions. */
export class CheckError extends Error {
  constructor(
    message: string,
    readonly exprId: bigint,
    /** Added to the node's offset: a field select is positioned on its dot, the field starts one later. */
    readonly offsetShift = 0,
  ) {
    super(message);
  }
}

export interface CheckedCondition {
  /** Names used as `lists.<name>`, so evaluation can report a missing list by name. */
  readonly listNames: readonly string[];
  /** The variables it reads (score, signals, ...), so evaluation binds only those. */
  readonly variables: readonly string[];
}

/** What a condition refers to, gathered while it is checked. */
interface Uses {
  listNames: Set<string>;
  variables: Set<string>;
  /** Comprehensions (all, exists, exists_one, map, filter) met so far. */
  comprehensions: number;
  /** How many comprehension loops enclose the node being checked. */
  loopDepth: number;
}

/**
 * Comprehensions per condition. Each walks its list once per decision on the
 * request thread, so their number bounds a rule's cost (with nesting refused):
 * a rule may cost one pass over each list it names, never one pass per
 * element of another.
 */
const MAX_COMPREHENSIONS = 4;

type Scope = ReadonlyMap<string, ValueType>;

/** Throws CheckError unless `expr` is a well-typed boolean condition. */
export function checkCondition(expr: Expr): CheckedCondition {
  const uses: Uses = { listNames: new Set(), variables: new Set(), comprehensions: 0, loopDepth: 0 };
  const type = typeOf(expr, new Map(), uses);
  if (!isA(type, "bool")) {
    throw new CheckError(`condition must be a boolean, not ${typeName(type)}`, expr.id);
  }
  return { listNames: [...uses.listNames], variables: [...uses.variables] };
}

/**
 * Rewrites int and uint literals to doubles. Every bound value is a JSON
 * number, which CEL sees as a double, and CEL has no mixed int/double
 * arithmetic, so without this `amount * 2` would fail at run time.
 */
export function literalsToDouble(expr: Expr): void {
  const kind = expr.exprKind;
  if (kind.case !== "constExpr") {
    // Identifiers have no literals; struct literals are refused by the checker.
    subexpressions(expr).forEach(literalsToDouble);
    return;
  }
  const constant = kind.value.constantKind;
  if (constant.case === "int64Value" || constant.case === "uint64Value") {
    kind.value.constantKind = { case: "doubleValue", value: Number(constant.value) };
  }
}

/** The expressions directly inside `expr`, for the walks over a condition (here and in compile.ts). */
export function subexpressions(expr: Expr): Expr[] {
  const kind = expr.exprKind;
  switch (kind.case) {
    case "selectExpr":
      return kind.value.operand === undefined ? [] : [kind.value.operand];
    case "callExpr":
      return kind.value.target === undefined ? kind.value.args : [kind.value.target, ...kind.value.args];
    case "listExpr":
      return kind.value.elements;
    case "comprehensionExpr": {
      const { iterRange, accuInit, loopCondition, loopStep, result } = kind.value;
      return [iterRange, accuInit, loopCondition, loopStep, result].filter((part) => part !== undefined);
    }
    default:
      return [];
  }
}

function typeOf(expr: Expr, scope: Scope, uses: Uses): ValueType {
  const kind = expr.exprKind;
  switch (kind.case) {
    case "constExpr":
      return constantType(expr.id, kind.value.constantKind.case);
    case "identExpr": {
      const local = scope.get(kind.value.name);
      if (local !== undefined) return local;
      const type = VARIABLES.get(kind.value.name);
      if (type === undefined) throw new CheckError(`unknown variable '${kind.value.name}'`, expr.id);
      uses.variables.add(kind.value.name);
      return type;
    }
    case "selectExpr":
      return selectType(expr.id, kind.value, scope, uses);
    case "callExpr":
      return callType(expr.id, kind.value, scope, uses);
    case "listExpr": {
      if (kind.value.optionalIndices.length > 0) {
        throw new CheckError("optional list elements are not supported", expr.id);
      }
      let element: ValueType | undefined;
      for (const item of kind.value.elements) {
        const itemType = typeOf(item, scope, uses);
        if (element !== undefined && !comparable(element, itemType)) {
          throw new CheckError(`list mixes ${typeName(element)} and ${typeName(itemType)}`, item.id);
        }
        element = element === undefined ? itemType : unify(element, itemType);
      }
      return listOf(element ?? DYN);
    }
    case "comprehensionExpr":
      return comprehensionType(expr.id, kind.value, scope, uses);
    case "structExpr":
      throw new CheckError("map and message literals are not supported", expr.id);
    default:
      throw new CheckError("unsupported expression", expr.id);
  }
}

function constantType(id: bigint, constant: ExprKind<"constExpr">["constantKind"]["case"]): ValueType {
  switch (constant) {
    case "boolValue":
      return BOOL;
    case "int64Value":
    case "uint64Value":
    case "doubleValue":
      return NUMBER;
    case "stringValue":
      return STRING;
    case "nullValue":
      return NULL;
    default:
      throw new CheckError("only bool, number, string and null literals are supported", id);
  }
}

function selectType(id: bigint, select: Select, scope: Scope, uses: Uses): ValueType {
  if (select.operand === undefined) throw new CheckError("invalid field selection", id);
  const operand = typeOf(select.operand, scope, uses);
  const field = select.field;
  if (select.testOnly) {
    // has(x.f): meaningful for metadata keys; on a fixed-shape object it only validates the path.
    if (operand.kind === "map" || operand.kind === "dyn") return BOOL;
    if (operand.kind === "object" && operand.fields.has(field)) return BOOL;
    throw new CheckError(`has() cannot test '${field}' on ${typeName(operand)}`, id);
  }
  switch (operand.kind) {
    case "object": {
      const fieldType = operand.fields.get(field);
      if (fieldType === undefined) throw new CheckError(`${operand.path} has no field '${field}'`, id, 1);
      return fieldType;
    }
    case "map":
      return operand.value;
    case "dyn":
      return DYN;
    case "lists":
      uses.listNames.add(field);
      return { kind: "namedList", name: field };
    default:
      throw new CheckError(`cannot read field '${field}' of ${typeName(operand)}`, id, 1);
  }
}

function comprehensionType(id: bigint, value: Comprehension, scope: Scope, uses: Uses): ValueType {
  const { iterRange, accuInit, loopCondition, loopStep, result } = value;
  if (
    iterRange === undefined ||
    accuInit === undefined ||
    loopCondition === undefined ||
    loopStep === undefined ||
    result === undefined
  ) {
    throw new CheckError("invalid comprehension", id);
  }
  if (value.iterVar2 !== "") throw new CheckError("two-variable comprehensions are not supported", id);
  if (uses.loopDepth > 0) {
    // Nested loops multiply: ten 10-element lists nested seven deep are 10^7 steps in 170 characters.
    throw new CheckError("all, exists, exists_one, map and filter cannot be nested: the rule's cost would multiply with every level", id);
  }
  if (++uses.comprehensions > MAX_COMPREHENSIONS) {
    throw new CheckError(`a condition may use all, exists, exists_one, map and filter at most ${MAX_COMPREHENSIONS} times`, id);
  }
  const range = typeOf(iterRange, scope, uses);
  let element: ValueType;
  if (range.kind === "list") element = range.element;
  else if (range.kind === "map") element = STRING;
  else if (range.kind === "dyn") element = DYN;
  else throw new CheckError(`cannot iterate over ${typeName(range)}`, iterRange.id);
  const accumulator = typeOf(accuInit, scope, uses);
  const accuScope = new Map(scope).set(value.accuVar, accumulator);
  const loopScope = new Map(accuScope).set(value.iterVar, element);
  uses.loopDepth++;
  expectBool(loopCondition, typeOf(loopCondition, loopScope, uses), "loop condition");
  const step = typeOf(loopStep, loopScope, uses);
  uses.loopDepth--;
  if (!comparable(accumulator, step)) {
    throw new CheckError(`loop step gives ${typeName(step)}, expected ${typeName(accumulator)}`, loopStep.id);
  }
  return typeOf(result, accuScope, uses);
}

const STRING_PREDICATES = new Set(["contains", "startsWith", "endsWith", "matches"]);

function callType(id: bigint, call: Call, scope: Scope, uses: Uses): ValueType {
  const name = call.function;
  const args = call.args.map((arg) => ({ expr: arg, type: typeOf(arg, scope, uses) }));
  const target = call.target === undefined ? undefined : typeOf(call.target, scope, uses);
  const operator = displayName(name);
  const refuse = (): never => {
    const types = args.map((arg) => typeName(arg.type)).join(", ");
    throw new CheckError(`${operator} cannot be applied to (${types})`, id);
  };

  if (target !== undefined) {
    if (name === "size" && args.length === 0) return sizeType(id, target);
    if (STRING_PREDICATES.has(name) && args.length === 1) {
      if (!isA(target, "string") || !isA(args[0]?.type, "string")) {
        throw new CheckError(`${name}() needs a string receiver and a string argument`, id);
      }
      if (name === "matches" && args[0] !== undefined) checkPattern(args[0].expr);
      return BOOL;
    }
    throw new CheckError(`unknown method '${name}' on ${typeName(target)}`, id);
  }

  const [left, right, third] = args;
  switch (name) {
    case "_&&_":
    case "_||_":
      for (const arg of args) expectBool(arg.expr, arg.type, `operand of ${operator}`);
      return BOOL;
    case "!_":
    case "@not_strictly_false":
      if (left === undefined) return refuse();
      expectBool(left.expr, left.type, `operand of ${operator}`);
      return BOOL;
    case "_==_":
    case "_!=_":
      if (left === undefined || right === undefined || !comparable(left.type, right.type)) return refuse();
      return BOOL;
    case "_<_":
    case "_<=_":
    case "_>_":
    case "_>=_":
      if (left === undefined || right === undefined) return refuse();
      if (orderedKind(left.type, right.type) === undefined) return refuse();
      return BOOL;
    case "_+_":
      return (left && right && plusType(left.type, right.type)) ?? refuse();
    case "_-_":
    case "_*_":
    case "_/_":
      if (!args.every((arg) => isA(arg.type, "number")) || args.length !== 2) return refuse();
      return NUMBER;
    case "-_":
      if (left === undefined || !isA(left.type, "number")) return refuse();
      return NUMBER;
    case "_%_":
      throw new CheckError("% is not supported: numbers in conditions are doubles", id);
    case "_?_:_":
      if (left === undefined || right === undefined || third === undefined) return refuse();
      expectBool(left.expr, left.type, "condition of ?:");
      if (!comparable(right.type, third.type)) return refuse();
      return unify(right.type, third.type);
    case "_[_]":
      return (left && right && indexType(left.type, right.type)) ?? refuse();
    case "@in":
      if (left === undefined || right === undefined || !inAllowed(left.type, right.type)) return refuse();
      return BOOL;
    case "size":
      if (left === undefined || args.length !== 1) return refuse();
      return sizeType(id, left.type);
    default:
      throw new CheckError(`unknown function '${operator}'`, id);
  }
}

/** The largest compiled pattern matches() may use: its cost is its size times the length of the text. */
const MAX_PATTERN_INSTRUCTIONS = 100;

/**
 * matches() takes a pattern written in the condition, which must compile as
 * CEL compiles it (RE2, linear time) and stay small: RE2 runs in time
 * proportional to the text times the compiled pattern, and a 340-character
 * pattern of counted repetitions compiles to 20,000 instructions, seconds per
 * decision on a long string. A computed pattern could not be checked here.
 */
function checkPattern(pattern: Expr): void {
  const constant = pattern.exprKind.case === "constExpr" ? pattern.exprKind.value.constantKind : undefined;
  if (constant?.case !== "stringValue") {
    throw new CheckError("matches() needs its pattern written in the condition, as a string", pattern.id);
  }
  let size: number;
  try {
    size = compiledPattern(constant.value).re2Input.prog.numInst();
  } catch (error) {
    throw new CheckError(`matches() pattern is not a valid RE2 expression: ${error instanceof Error ? error.message : String(error)}`, pattern.id);
  }
  if (size > MAX_PATTERN_INSTRUCTIONS) {
    throw new CheckError(`matches() pattern is too large: it compiles to ${size} instructions, at most ${MAX_PATTERN_INSTRUCTIONS}`, pattern.id);
  }
}

/** Operators are named like `_==_` in the AST; users wrote `==`. */
function displayName(name: string): string {
  if (name === "@in") return "in";
  if (name === "_[_]") return "[]";
  return name.startsWith("_") || name.endsWith("_") ? name.replaceAll("_", "") : name;
}

function sizeType(id: bigint, type: ValueType): ValueType {
  if (type.kind === "string" || type.kind === "list" || type.kind === "map" || type.kind === "dyn") return NUMBER;
  throw new CheckError(`size() cannot be applied to ${typeName(type)}`, id);
}

function expectBool(expr: Expr, type: ValueType, what: string): void {
  if (!isA(type, "bool")) throw new CheckError(`${what} must be a boolean, not ${typeName(type)}`, expr.id);
}

/** True when a value of `type` can be used where `kind` is required; nullable passes and fails at run time on null. */
function isA(type: ValueType | undefined, kind: "bool" | "number" | "string"): boolean {
  if (type === undefined) return false;
  const bare = type.kind === "nullable" ? type.inner : type;
  return bare.kind === kind || bare.kind === "dyn";
}

function orderedKind(left: ValueType, right: ValueType): "number" | "string" | undefined {
  if (isA(left, "number") && isA(right, "number")) return "number";
  if (isA(left, "string") && isA(right, "string")) return "string";
  return undefined;
}

function plusType(left: ValueType, right: ValueType): ValueType | undefined {
  if (orderedKind(left, right) === "number") return left.kind === "dyn" && right.kind === "dyn" ? DYN : NUMBER;
  if (orderedKind(left, right) === "string") return left.kind === "dyn" && right.kind === "dyn" ? DYN : STRING;
  if (left.kind === "list" && right.kind === "list" && comparable(left.element, right.element)) {
    return listOf(unify(left.element, right.element));
  }
  if ((left.kind === "list" && right.kind === "dyn") || (left.kind === "dyn" && right.kind === "list")) return DYN;
  return undefined;
}

function indexType(container: ValueType, index: ValueType): ValueType | undefined {
  if (container.kind === "list" && isA(index, "number")) return container.element;
  if (container.kind === "map" && isA(index, "string")) return container.value;
  if (container.kind === "dyn") return DYN;
  return undefined;
}

function inAllowed(value: ValueType, collection: ValueType): boolean {
  switch (collection.kind) {
    case "list":
      return comparable(value, collection.element);
    case "map":
    case "namedList":
      return isA(value, "string");
    case "dyn":
      return true;
    default:
      return false;
  }
}

/** Whether `==` between the two types can ever be true (CEL would otherwise silently say false). */
function comparable(left: ValueType, right: ValueType): boolean {
  if (left.kind === "dyn" || right.kind === "dyn") return true;
  if (left.kind === "nullable") return right.kind === "null" || comparable(left.inner, right);
  if (right.kind === "nullable") return left.kind === "null" || comparable(left, right.inner);
  switch (left.kind) {
    case "list":
      return right.kind === "list" && comparable(left.element, right.element);
    case "map":
      return right.kind === "map" && comparable(left.value, right.value);
    case "object":
      return right.kind === "object" && left.path === right.path;
    case "lists":
    case "namedList":
      return false;
    default:
      return left.kind === right.kind;
  }
}

/** The type of a value that is one of two comparable types. */
function unify(left: ValueType, right: ValueType): ValueType {
  if (left.kind === "dyn" || right.kind === "dyn") return DYN;
  if (left.kind === "null") {
    return right.kind === "null" || right.kind === "nullable" ? right : { kind: "nullable", inner: right };
  }
  if (right.kind === "null") return unify(right, left);
  if (left.kind === "nullable") {
    return { kind: "nullable", inner: unify(left.inner, right.kind === "nullable" ? right.inner : right) };
  }
  if (right.kind === "nullable") return unify(right, left);
  if (left.kind === "list" && right.kind === "list") return listOf(unify(left.element, right.element));
  return left;
}
