#!/usr/bin/env node
// The service is written in TypeScript and runs through tsx, so a fresh
// `npm ci` is all it needs: no build step, no dist/ to keep in sync. tsx's
// CommonJS hook compiles the sources in this thread; its ESM loader
// (`--import tsx`) would run a loader thread beside it, about 20 MB more.
import { createRequire } from "node:module";
import { register } from "tsx/cjs/api";

register();
const require = createRequire(import.meta.url);
await require("../src/cli/fraudctl.ts").main();
