/**
 * Structured JSON logs, one object per line. API keys never reach a log line
 * whole: callers pass them through `keyHint`, which keeps the last 4 characters.
 */
export type LogLevel = "debug" | "info" | "warn" | "error";

export type LogFields = Record<string, unknown>;

export interface Logger {
  log(level: LogLevel, message: string, fields?: LogFields): void;
}

export type LogSink = (line: string) => void;

/**
 * Standard output, written in batches: lines logged during one event-loop turn
 * go out in one write instead of one system call each.
 */
function bufferedStdout(): LogSink {
  let pending: string[] = [];
  const flush = () => {
    const text = pending.join("\n") + "\n";
    pending = [];
    try {
      process.stdout.write(text);
    } catch (error) {
      // Standard output redirected to a file writes synchronously, and a full disk throws here rather than
      // failing the stream: reported as the stream's error, which fraudctl's listener says once (the lines are lost).
      process.stdout.emit("error", error);
    }
  };
  process.once("exit", () => {
    if (pending.length > 0) flush();
  });
  return (line) => {
    if (pending.push(line) === 1) setImmediate(flush);
  };
}

export function createLogger(sink: LogSink = bufferedStdout()): Logger {
  return {
    log(level, message, fields) {
      sink(JSON.stringify({ time: new Date().toISOString(), level, msg: message, ...fields }));
    },
  };
}

/** The only form in which a key may be logged or displayed: its last 4 characters. */
export function keyHint(key: string): string {
  return `…${key.slice(-4)}`;
}

/** A logger that drops everything (benchmarks). */
export const silentLogger: Logger = { log() {} };

/**
 * A failure that repeats while its cause lasts (a full disk: a checkpoint every 200 ms, an outcome every
 * 500 ms): its first occurrence is logged, then at most one line every `everyMs`, saying how many it stands
 * for (`repeated`), so that the log neither floods a disk that is already full nor hides that it goes on.
 */
export class RepeatedFailureLog {
  private lastLoggedAt = Number.NEGATIVE_INFINITY;
  private unlogged = 0;

  constructor(
    private readonly logger: Logger,
    private readonly level: LogLevel,
    private readonly message: string,
    private readonly everyMs = 60_000,
    private readonly now: () => number = () => performance.now(),
  ) {}

  failed(fields: LogFields): void {
    const at = this.now();
    if (at - this.lastLoggedAt < this.everyMs) {
      this.unlogged++;
      return;
    }
    this.logger.log(this.level, this.message, this.unlogged > 0 ? { ...fields, repeated: this.unlogged + 1 } : fields);
    this.lastLoggedAt = at;
    this.unlogged = 0;
  }
}
