/** Names the calling thread for the operating system, where it can (Linux); see thread-name.cjs. */
export declare function nameThread(name: string): void;
