import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    setupFiles: ["test/setup.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // A poll ends as soon as its condition holds; the ceiling only has to outlast a loaded CI machine.
    expect: { poll: { timeout: 10_000 } },
    // Real servers, SQLite files and worker pools per file: keep the 2-core machine responsive.
    maxWorkers: 2,
  },
});
