import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";

export const FRAUDCTL = path.resolve("bin/fraudctl.js");

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** How long a `fraudctl` command may run before the test gives up on it (`serve` only ends when told to). */
const CLI_TIMEOUT_MS = 20_000;

/** Runs the real `fraudctl` bin in a child process; one still running after {@link CLI_TIMEOUT_MS} is killed and fails the test. */
export function runFraudctl(args: string[], env: NodeJS.ProcessEnv): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [FRAUDCTL, ...args], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`fraudctl ${args.join(" ")} still running after ${CLI_TIMEOUT_MS} ms:\n${stdout}${stderr}`));
    }, CLI_TIMEOUT_MS);
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    child.on("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Server processes started in this test file and not yet exited, killed after it by test/setup.ts. */
const runningServers = new Set<ServerProcess>();

/** Kills whatever server process a test left running (a failed assertion before its own kill) and waits for it to exit. */
export async function stopServerProcesses(): Promise<void> {
  const left = [...runningServers];
  for (const server of left) server.child.kill("SIGKILL");
  await Promise.all(left.map((server) => server.exited));
}

export interface ServerProcess {
  child: ChildProcess;
  url: string;
  port: number;
  /** Everything printed so far. */
  output(): string;
  /** What was printed on standard output alone. */
  stdout(): string;
  exited: Promise<number | null>;
}

/**
 * Starts `fraudctl serve` as a real process on a free port and waits until it listens; with `npmStart`,
 * as the README starts it (`npm start`), the child being npm.
 */
export function startServerProcess(env: NodeJS.ProcessEnv, options: { npmStart?: boolean } = {}): Promise<ServerProcess> {
  return new Promise((resolve, reject) => {
    const [command, args] = options.npmStart ? ["npm", ["start", "--silent"]] : [process.execPath, [FRAUDCTL, "serve"]];
    const child = spawn(command, args, {
      env: { ...process.env, PORT: "0", HOST: "127.0.0.1", ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    let stdout = "";
    const exited = new Promise<number | null>((done) => child.on("exit", (code) => done(code)));
    const server: ServerProcess = { child, url: "", port: 0, output: () => output, stdout: () => stdout, exited };
    runningServers.add(server);
    void exited.then(() => runningServers.delete(server));
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      stdout += chunk.toString();
      const match = /"msg":"listening".*?"port":(\d+)/.exec(output);
      if (match) {
        server.port = Number(match[1]);
        server.url = `http://127.0.0.1:${server.port}`;
        resolve(server);
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
    void exited.then((code) => reject(new Error(`server exited with ${code} before listening:\n${output}`)));
  });
}
