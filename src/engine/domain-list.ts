// A large, read-only set of domain names stored as sorted UTF-8 bytes in
// SharedArrayBuffers. A JS Set of the ~120k disposable domains costs several
// MB of heap per worker thread; this form is built once and shared.

/** The typed arrays of a built list; structured-cloning it shares the memory. */
export interface SharedDomainList {
  /** All names concatenated, in byte order. */
  readonly bytes: Uint8Array;
  /** offsets[i]..offsets[i + 1] delimits name i; length is count + 1. */
  readonly offsets: Uint32Array;
}

const encoder = new TextEncoder();

export class DomainList {
  private readonly list: SharedDomainList;

  private constructor(list: SharedDomainList) {
    this.list = list;
  }

  /** Names are lowercased; duplicates collapse. */
  static build(names: Iterable<string>): DomainList {
    const encoded = [...new Set(Array.from(names, (name) => name.toLowerCase()))].map((name) =>
      encoder.encode(name),
    );
    encoded.sort(compareBytes);
    const totalLength = encoded.reduce((sum, name) => sum + name.length, 0);
    const bytes = new Uint8Array(new SharedArrayBuffer(totalLength));
    const offsets = new Uint32Array(new SharedArrayBuffer((encoded.length + 1) * 4));
    let position = 0;
    encoded.forEach((name, index) => {
      offsets[index] = position;
      bytes.set(name, position);
      position += name.length;
    });
    offsets[encoded.length] = position;
    return new DomainList({ bytes, offsets });
  }

  static fromShared(list: SharedDomainList): DomainList {
    return new DomainList(list);
  }

  toShared(): SharedDomainList {
    return this.list;
  }

  get byteLength(): number {
    return this.list.bytes.byteLength + this.list.offsets.byteLength;
  }

  /** Exact match of an already lowercased name. */
  has(name: string): boolean {
    const needle = encoder.encode(name);
    const { bytes, offsets } = this.list;
    let low = 0;
    let high = offsets.length - 2;
    while (low <= high) {
      const middle = (low + high) >>> 1;
      const start = offsets[middle] ?? 0;
      const order = compareBytes(bytes.subarray(start, offsets[middle + 1] ?? start), needle);
      if (order === 0) return true;
      if (order < 0) low = middle + 1;
      else high = middle - 1;
    }
    return false;
  }
}

function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const length = Math.min(a.length, b.length);
  for (let i = 0; i < length; i++) {
    const difference = (a[i] ?? 0) - (b[i] ?? 0);
    if (difference !== 0) return difference;
  }
  return a.length - b.length;
}
