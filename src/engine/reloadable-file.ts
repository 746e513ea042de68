// A small text file (Tor exit list, datacenter ranges) whose parsed content is
// replaced when the file changes on disk. Operators refresh these lists with a
// cron job, usually by writing a temporary file and renaming it over the old
// one, so a change shows up as a new inode, size or modification time.

import { readFileSync, statSync } from "node:fs";
import type { Stats } from "node:fs";

interface FileIdentity {
  readonly ino: number;
  readonly size: number;
  readonly mtimeMs: number;
}

function identityOf(stats: Stats): FileIdentity {
  return { ino: stats.ino, size: stats.size, mtimeMs: stats.mtimeMs };
}

function sameIdentity(a: FileIdentity, b: FileIdentity): boolean {
  return a.ino === b.ino && a.size === b.size && a.mtimeMs === b.mtimeMs;
}

export class ReloadableFile<T> {
  readonly path: string | undefined;
  private readonly parse: (text: string) => T;
  private content: T;
  private identity: FileIdentity | null = null;
  private error: string | null = null;

  /**
   * Without a path the content stays `empty` forever (the feature is off).
   * The file is read immediately; a missing or unreadable file leaves `empty`
   * in place and is reported by `lastError` instead of throwing, so a list that
   * a cron job has not fetched yet does not stop the service from starting.
   */
  constructor(path: string | undefined, parse: (text: string) => T, empty: T) {
    this.path = path;
    this.parse = parse;
    this.content = empty;
    this.reloadIfChanged();
  }

  get current(): T {
    return this.content;
  }

  /** Why the last read failed, or null when the current content matches the file. */
  get lastError(): string | null {
    return this.error;
  }

  /**
   * Re-reads the file when its inode, size or mtime differ from the last load.
   * Costs one stat() when nothing changed. On a read error the previous content
   * is kept. Returns true when new content was loaded.
   */
  reloadIfChanged(): boolean {
    if (this.path === undefined) return false;
    try {
      const identity = identityOf(statSync(this.path));
      if (this.identity !== null && sameIdentity(identity, this.identity)) return false;
      const content = this.parse(readFileSync(this.path, "utf8"));
      this.content = content;
      this.identity = identity;
      this.error = null;
      return true;
    } catch (cause) {
      this.error = cause instanceof Error ? cause.message : String(cause);
      return false;
    }
  }

  /**
   * Calls reloadIfChanged every `intervalMs`. Polling our own identity check
   * (instead of fs.watch / fs.watchFile) survives rename-over replacement and
   * cannot miss a change made between loading and starting to watch. The
   * timer does not keep the process alive. Returns a function that stops it.
   */
  watch(intervalMs: number, onReload?: () => void): () => void {
    if (this.path === undefined) return () => undefined;
    const timer = setInterval(() => {
      if (this.reloadIfChanged()) onReload?.();
    }, intervalMs);
    timer.unref();
    return () => clearInterval(timer);
  }
}
