// Behaviour signals from the browser SDK's interaction counters.

import type { BehaviorInput, BehaviorSignals } from "../types.js";

/** Loading a page, reading it and submitting takes a person longer than this. */
const MIN_HUMAN_TIME_ON_PAGE_MS = 1500;
/** Filling a form with several key presses takes a person longer than this. */
const MIN_HUMAN_FORM_FILL_MS = 800;
/** Sustained typing above ~15 keys/s is rare even for fast typists; 25 leaves margin. */
const MAX_HUMAN_KEYS_PER_SECOND = 25;
/** Fewer key presses than this are too few to judge typing speed. */
const MIN_KEYSTROKES_FOR_SPEED = 5;

export function computeBehaviorSignals(behavior: BehaviorInput | undefined): BehaviorSignals {
  const input = behavior ?? {};
  const counters = [input.keystrokes, input.pointerMoves, input.clicks, input.pasteEvents];
  const countersPresent = counters.some((counter) => counter !== undefined);
  const present = countersPresent || input.timeOnPageMs !== undefined || input.formFillMs !== undefined;
  const keystrokes = input.keystrokes ?? 0;
  const pointerMoves = input.pointerMoves ?? 0;
  const clicks = input.clicks ?? 0;
  const pasteEvents = input.pasteEvents ?? 0;
  const timeOnPageMs = input.timeOnPageMs ?? null;
  const formFillMs = input.formFillMs ?? null;

  const typedEnough = keystrokes >= MIN_KEYSTROKES_FOR_SPEED;
  const tooFast =
    (timeOnPageMs !== null && timeOnPageMs < MIN_HUMAN_TIME_ON_PAGE_MS) ||
    (formFillMs !== null &&
      typedEnough &&
      (formFillMs < MIN_HUMAN_FORM_FILL_MS || keystrokes / (formFillMs / 1000) > MAX_HUMAN_KEYS_PER_SECOND));

  return {
    present,
    timeOnPageMs,
    formFillMs,
    keystrokes,
    pointerMoves,
    pasteEvents,
    clicks,
    tooFast,
    noInteraction: countersPresent && keystrokes + pointerMoves + clicks + pasteEvents === 0,
    pasteOnly: pasteEvents > 0 && keystrokes === 0,
  };
}
