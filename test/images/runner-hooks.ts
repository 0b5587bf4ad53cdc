import { type CommandRunner, execaRunner } from "../../agent/images/index.ts";

export interface RecordedCall {
  command: string;
  args: string[];
}

/** The real runner, recording each call so tests can count copies and unpacks. */
export class RecordingRunner implements CommandRunner {
  readonly calls: RecordedCall[] = [];

  constructor(
    private readonly inner: CommandRunner = execaRunner,
    /** Runs after the real command; a throw here makes the call fail as if the tool had. */
    private readonly afterRun?: (call: RecordedCall) => void,
    private readonly beforeRun?: (call: RecordedCall) => void,
  ) {}

  async run(command: string, args: string[], opts: Parameters<CommandRunner["run"]>[2]) {
    const call = { command, args: [...args] };
    this.calls.push(call);
    this.beforeRun?.(call);
    const result = await this.inner.run(command, args, opts);
    this.afterRun?.(call);
    return result;
  }

  count(tool: string, ...sub: string[]): number {
    return this.calls.filter((c) => c.command.endsWith(tool) && sub.every((s, i) => c.args[i] === s)).length;
  }
}

export const skopeoCopies = (r: RecordingRunner) => r.count("skopeo", "copy");
export const skopeoInspects = (r: RecordingRunner) => r.count("skopeo", "inspect");
export const umociUnpacks = (r: RecordingRunner) => r.count("umoci", "raw", "unpack");

/** An HTTP client for the store that counts registry requests (blob and manifest GETs) and can act on each. */
export class CountingFetch {
  readonly urls: string[] = [];

  constructor(private readonly before?: (url: string) => void) {}

  readonly fetch: typeof fetch = (input, init) => {
    const url = typeof input === "string" ? input : input instanceof URL ? input.toString() : input.url;
    this.urls.push(url);
    this.before?.(url);
    return globalThis.fetch(input, init);
  };

  blobGets(): number {
    return this.urls.filter((u) => u.includes("/blobs/sha256:")).length;
  }
}
