// Entry of the decision writer's thread (see writer.ts). Node 20 does not apply
// tsx's ESM loader inside worker threads, but tsx's CommonJS hook works in any
// thread: register it and load the TypeScript worker through require().
import { createRequire } from "node:module";
import { register } from "tsx/cjs/api";

register();
const require = createRequire(import.meta.url);
require("./writer-worker.ts");
