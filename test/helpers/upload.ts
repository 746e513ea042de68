import type { Writable } from "node:stream";

/**
 * Writes `total` bytes, `chunk` after `chunk`, as fast as `sink` drains, until all are handed over or the
 * sink is destroyed (the server closed the connection); `written()` says how many were handed over so far.
 */
export function pumpUpload(sink: Writable, total: number, chunk: Buffer): { written: () => number } {
  let written = 0;
  const pump = (): void => {
    while (written < total && !sink.destroyed) {
      written += chunk.length;
      if (!sink.write(chunk)) {
        sink.once("drain", pump);
        return;
      }
    }
  };
  pump();
  return { written: () => written };
}
