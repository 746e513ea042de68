import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";

export const FRAUDCTL = path.resolve("bin/fraudctl.js");

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the real `fraudctl` bin in a child process. */
export function runFraudctl(args: string[], env: NodeJS.ProcessEnv): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [FRAUDCTL, ...args], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

export interface ServerProcess {
  child: ChildProcess;
  url: string;
  port: number;
  /** Everything printed so far. */
  output(): string;
  exited: Promise<number | null>;
}

/** Starts `fraudctl serve` as a real process on a free port and waits until it listens. */
export function startServerProcess(env: NodeJS.ProcessEnv): Promise<ServerProcess> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [FRAUDCTL, "serve"], {
      env: { ...process.env, PORT: "0", HOST: "127.0.0.1", ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    const exited = new Promise<number | null>((done) => child.on("exit", (code) => done(code)));
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const match = /"msg":"listening".*?"port":(\d+)/.exec(output);
      if (match) {
        const port = Number(match[1]);
        resolve({ child, url: `http://127.0.0.1:${port}`, port, output: () => output, exited });
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
    void exited.then((code) => reject(new Error(`server exited with ${code} before listening:\n${output}`)));
  });
}
