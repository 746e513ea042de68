// E-mail signals: syntax, disposable domains, machine-generated local parts
// and plus-addressing. A malformed address is a signal, not a request error.

import { domainToASCII, domainToUnicode } from "node:url";
import type { ReferenceData } from "../reference-data.js";
import type { EmailSignals } from "../types.js";

// Practical address syntax (RFC 5321 dot-atom, no quoted local parts or IP
// literals, which real sign-ups do not use). Domain labels allow Unicode
// letters for internationalised domains.
const LOCAL_PART = /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*$/;
const DOMAIN_LABEL = /^[\p{L}\p{N}](?:[\p{L}\p{N}-]{0,61}[\p{L}\p{N}])?$/u;
const MAX_LOCAL_LENGTH = 64;
const MAX_ADDRESS_LENGTH = 254;

const EMPTY_EMAIL: EmailSignals = Object.freeze({
  present: false,
  valid: false,
  domain: "",
  disposable: false,
  plusAddressed: false,
  randomLocalPart: false,
  localPartEntropy: 0,
});

/**
 * An e-mail address as written, in one spelling: case-insensitively,
 * surrounding spaces and a fully qualified domain's final dot ignored, its
 * domain in one spelling ({@link canonicalDomain}). List entries are compared
 * so (an analyst lists an address, not a mailbox); where an e-mail is counted
 * or linked, its mailbox is ({@link canonicalMailbox}).
 */
export function canonicalEmail(email: string): string {
  const address = email.trim().toLowerCase();
  const at = address.lastIndexOf("@");
  return at === -1 ? address : `${address.slice(0, at + 1)}${canonicalDomain(address.slice(at + 1))}`;
}

/** Mailbox providers that ignore dots in the local part. */
const DOTLESS_DOMAINS = new Set(["gmail.com", "googlemail.com"]);

/**
 * The mailbox an address delivers to, one spelling for all the addresses of
 * one inbox: {@link canonicalEmail}, the `+tag` dropped, and for Gmail the dots
 * dropped and googlemail.com read as gmail.com (`Jane.Doe+promo1@googlemail.com`
 * is `janedoe@gmail.com`). A person can make these up at will, one per signup,
 * so the velocity counters, the fraud graph and the consortium count and match
 * the mailbox. "" when not an address (nothing before or after the `@`).
 */
export function canonicalMailbox(email: string): string {
  const address = canonicalEmail(email);
  const at = address.lastIndexOf("@");
  if (at <= 0 || at === address.length - 1) return "";
  let local = address.slice(0, at);
  let domain = address.slice(at + 1);
  const plus = local.indexOf("+");
  if (plus > 0) local = local.slice(0, plus);
  if (DOTLESS_DOMAINS.has(domain)) {
    local = local.replaceAll(".", "");
    domain = "gmail.com";
  }
  return `${local}@${domain}`;
}

/** A domain of ASCII letters, digits, hyphens and dots with no punycode label: already in its one spelling. */
const PLAIN_ASCII_DOMAIN = /^[a-z0-9.-]*$/;

/**
 * A domain in one spelling: lower case, written without a fully qualified
 * domain's final dot (`example.com.` is `example.com`), and an
 * internationalised one in Unicode whether it was written so or in punycode
 * (`münchen.de` and `xn--mnchen-3ya.de` are one domain), with the
 * compatibility forms IDNA maps (fullwidth letters) mapped. A domain IDNA
 * refuses stays as written, lower-cased; so does one with a `%`, which the URL
 * parser's IDNA would percent-decode (`ex%41mple.com` is no spelling of
 * example.com in mail).
 */
function canonicalDomain(domain: string): string {
  const lower = domain.toLowerCase().replace(/\.$/, "");
  if ((PLAIN_ASCII_DOMAIN.test(lower) && !lower.includes("xn--")) || lower.includes("%")) return lower;
  const ascii = domainToASCII(lower);
  return ascii === "" ? lower : domainToUnicode(ascii);
}

/** An address split into its local part and canonical domain, or null when it is not an e-mail address by the syntax above. */
function parseAddress(email: string): { localPart: string; domain: string } | null {
  const address = email.trim();
  const at = address.lastIndexOf("@");
  if (at <= 0) return null;
  const localPart = address.slice(0, at);
  const domain = canonicalDomain(address.slice(at + 1));
  const valid = address.length <= MAX_ADDRESS_LENGTH && localPart.length <= MAX_LOCAL_LENGTH && LOCAL_PART.test(localPart) && isValidDomain(domain);
  return valid ? { localPart, domain } : null;
}

/** Whether `email` is an e-mail address by the syntax the engine judges `signals.email.valid` by. */
export function isEmailAddress(email: string): boolean {
  return parseAddress(email) !== null;
}

export function computeEmailSignals(email: string, referenceData: ReferenceData): EmailSignals {
  if (email.trim() === "") return EMPTY_EMAIL;
  const parsed = parseAddress(email);
  if (parsed === null) return { ...EMPTY_EMAIL, present: true };
  const { localPart, domain } = parsed;

  const plusIndex = localPart.indexOf("+");
  const baseLocalPart = (plusIndex === -1 ? localPart : localPart.slice(0, plusIndex)).toLowerCase();
  return {
    present: true,
    valid: true,
    domain,
    disposable: isDisposableDomain(domain, referenceData),
    plusAddressed: plusIndex !== -1 && plusIndex < localPart.length - 1,
    randomLocalPart: looksRandom(baseLocalPart),
    localPartEntropy: Math.round(shannonEntropy(baseLocalPart) * 1000) / 1000,
  };
}

function isValidDomain(domain: string): boolean {
  const labels = domain.split(".");
  const topLevel = labels[labels.length - 1] ?? "";
  return labels.length >= 2 && labels.every((label) => DOMAIN_LABEL.test(label)) && /^(\p{L}{2,}|xn--[a-z0-9-]+)$/u.test(topLevel);
}

/** `domain` in its canonical spelling ({@link canonicalDomain}). */
function isDisposableDomain(domain: string, referenceData: ReferenceData): boolean {
  // The list writes most internationalised domains in punycode and a few in Unicode: both spellings are looked up.
  if (PLAIN_ASCII_DOMAIN.test(domain)) return isListedDisposable(domain, referenceData);
  return isListedDisposable(domain, referenceData) || isListedDisposable(domainToASCII(domain), referenceData);
}

function isListedDisposable(domain: string, referenceData: ReferenceData): boolean {
  if (referenceData.disposableDomains.has(domain)) return true;
  // wildcard.json entries cover the domain and every subdomain of it.
  for (let dot = -1; ; ) {
    if (referenceData.disposableWildcardDomains.has(domain.slice(dot + 1))) return true;
    dot = domain.indexOf(".", dot + 1);
    if (dot === -1) return false;
  }
}

/** Shannon entropy in bits per character. */
function shannonEntropy(text: string): number {
  if (text.length === 0) return 0;
  const counts = new Map<string, number>();
  for (const character of text) counts.set(character, (counts.get(character) ?? 0) + 1);
  let entropy = 0;
  for (const count of counts.values()) {
    const probability = count / text.length;
    entropy -= probability * Math.log2(probability);
  }
  return entropy;
}

function longestRun(text: string, pattern: RegExp): number {
  let longest = 0;
  for (const run of text.match(pattern) ?? []) longest = Math.max(longest, run.length);
  return longest;
}

/**
 * Names, words and name+year local parts trip at most one of these tells;
 * generated ones ("xk7qz9vbw3p2", "qwrtplkjhg", "user8837261904") trip two.
 * Names are why each is as strict as it is: German and Polish ones run six
 * consonants together ("hirschbrunner", "wojciechszczepanski"), birth dates
 * are eight digits, and any long name has many distinct letters. What names
 * do not have is letters that never repeat: generated strings use nearly
 * every character once, so their entropy is close to the most their length
 * allows.
 */
function looksRandom(localPart: string): boolean {
  const digits = localPart.match(/\d+/g) ?? [];
  const consonants = longestRun(localPart, /[bcdfghjklmnpqrstvwxz]+/g);
  const switches = letterDigitSwitches(localPart);
  // Each tell counts once; the two no name ever shows count twice (ten consonants in a row, or letters and
  // digits swapping seven times: "qwrtplkjhgf", "a8f3k2m9").
  const tells = [
    digits.some((run) => run.length >= 6 && !isDate(run)) ? 1 : 0,
    consonants >= 10 ? 2 : consonants >= 7 ? 1 : 0,
    // From 12 characters: in shorter ones, a name and a number hardly repeat a character (jack193847).
    localPart.length >= 12 && shannonEntropy(localPart) >= 0.95 * Math.log2(localPart.length) ? 1 : 0,
    switches >= 7 ? 2 : switches >= 5 ? 1 : 0,
  ];
  return tells.reduce((sum, tell) => sum + tell, 0) >= 2;
}

/** How often a letter is followed by a digit or a digit by a letter ("a8f3" switches three times). */
function letterDigitSwitches(text: string): number {
  let switches = 0;
  for (let i = 1; i < text.length; i++) {
    const before = text[i - 1] as string;
    const after = text[i] as string;
    const letterThenDigit = /[a-z]/.test(before) && /\d/.test(after);
    const digitThenLetter = /\d/.test(before) && /[a-z]/.test(after);
    if (letterThenDigit || digitThenLetter) switches++;
  }
  return switches;
}

/** A date as people write theirs into addresses: YYYYMMDD, DDMMYYYY, MMDDYYYY, YYMMDD or DDMMYY. */
function isDate(run: string): boolean {
  const day = (text: string) => Number(text) >= 1 && Number(text) <= 31;
  const month = (text: string) => Number(text) >= 1 && Number(text) <= 12;
  const year = (text: string) => Number(text) >= 1900 && Number(text) <= 2099;
  if (run.length === 8) {
    return (
      (year(run.slice(0, 4)) && month(run.slice(4, 6)) && day(run.slice(6))) ||
      (day(run.slice(0, 2)) && month(run.slice(2, 4)) && year(run.slice(4))) ||
      (month(run.slice(0, 2)) && day(run.slice(2, 4)) && year(run.slice(4)))
    );
  }
  if (run.length === 6) return (month(run.slice(2, 4)) && day(run.slice(4))) || (day(run.slice(0, 2)) && month(run.slice(2, 4)));
  return false;
}
