import type { Clock } from "../../src/clock.js";

/** A clock tests move by hand, so time-dependent behaviour needs no sleeping. */
export class ManualClock implements Clock {
  constructor(private current = Date.UTC(2026, 10, 21, 12, 0, 0)) {}

  now(): number {
    return this.current;
  }

  advance(ms: number): void {
    this.current += ms;
  }
}
