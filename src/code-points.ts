/**
 * Characters as the contract's limits and the policies' CEL `size()` count them: code points (a surrogate
 * pair is one, a lone surrogate one too). Counted without building an array of them.
 */
export function codePoints(text: string): number {
  let count = text.length;
  for (let i = 1; i < text.length; i++) {
    if ((text.charCodeAt(i) & 0xfc00) === 0xdc00 && (text.charCodeAt(i - 1) & 0xfc00) === 0xd800) count--;
  }
  return count;
}

/**
 * A lone UTF-16 surrogate (a well-formed pair does not match): JSON can write one (`"\ud800"`), UTF-8, and so
 * protobuf's binary form, cannot.
 */
const LONE_SURROGATE = /\p{Cs}/u;

export function hasLoneSurrogate(text: string): boolean {
  return LONE_SURROGATE.test(text);
}
