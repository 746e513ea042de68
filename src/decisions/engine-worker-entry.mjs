// Piscina's entry for the engine workers. Node 20 does not apply tsx's ESM
// loader inside worker threads, but tsx's CommonJS hook works in any thread:
// register it and load the TypeScript worker through require().
import { createRequire } from "node:module";
import { register } from "tsx/cjs/api";

register();
const require = createRequire(import.meta.url);

export const { evaluateBatch, backtest } = require("./engine-worker.ts");
