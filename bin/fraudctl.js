#!/usr/bin/env node
// The service is written in TypeScript and runs through tsx's loader, so a fresh
// `npm ci` is all it needs: no build step, no dist/ to keep in sync.
import "tsx";

const { main } = await import("../src/cli/fraudctl.ts");
await main();
