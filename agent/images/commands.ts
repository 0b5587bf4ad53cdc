import { BerthError } from "../../shared/errors.ts";

export interface RunCommandOptions {
  timeoutMs: number;
  signal?: AbortSignal;
}

export interface CommandResult {
  stdout: string;
  stderr: string;
}

/**
 * Runs one external tool (skopeo, umoci, tar). The store takes it as a
 * dependency so tests can wrap the real one to count or break calls.
 */
export interface CommandRunner {
  run(command: string, args: string[], opts: RunCommandOptions): Promise<CommandResult>;
}

/** A tool exited non-zero, timed out or was cancelled. */
export class CommandFailedError extends Error {
  constructor(
    readonly command: string,
    readonly exitCode: number | undefined,
    readonly stderr: string,
    readonly reason: "exit" | "timeout" | "cancelled" | "spawn",
  ) {
    super(
      `${command} failed (${reason}${exitCode !== undefined ? ` ${exitCode}` : ""}): ${stderr.slice(-500)}`,
    );
    this.name = "CommandFailedError";
  }
}

/** The real runner: execa, killed with SIGTERM (then SIGKILL) on timeout or abort. */
export const execaRunner: CommandRunner = {
  async run(command, args, opts) {
    // Loaded on the first pull, not at start: an idle agent never needs it (docs/agent-host.md, "Memory").
    const { execa } = await import("execa");
    const r = await execa(command, args, {
      reject: false,
      timeout: opts.timeoutMs,
      forceKillAfterDelay: 5_000,
      ...(opts.signal ? { cancelSignal: opts.signal } : {}),
      stdin: "ignore",
      // Manifests are hashed byte for byte; a stripped newline changes the digest.
      stripFinalNewline: false,
      maxBuffer: 64 * 1024 * 1024,
      env: { LC_ALL: "C" },
    });
    const stdout = String(r.stdout ?? "");
    const stderr = String(r.stderr ?? "");
    if (!r.failed) return { stdout, stderr };
    if (r.timedOut) throw new CommandFailedError(command, undefined, stderr, "timeout");
    if (r.isCanceled) throw new CommandFailedError(command, undefined, stderr, "cancelled");
    if (r.exitCode === undefined) {
      throw new CommandFailedError(
        command,
        undefined,
        stderr || String(r.message ?? "could not start"),
        "spawn",
      );
    }
    throw new CommandFailedError(command, r.exitCode, stderr, "exit");
  },
};

/** Replaces each secret in `text` with "***". */
export function redact(text: string, secrets: Array<string | undefined>): string {
  let out = text;
  for (const s of secrets) {
    if (s && s.length >= 3) out = out.split(s).join("***");
  }
  // A basic-auth header or "user:pass@" URL part that slipped into a message.
  return out
    .replace(/(Basic|Bearer)\s+[A-Za-z0-9+/=._-]+/g, "$1 ***")
    .replace(/\/\/[^/\s:@]+:[^/\s@]+@/g, "//***@");
}

/** skopeo's last fatal message without its logrus wrapper, trimmed. */
export function skopeoMessage(stderr: string): string {
  const lines = stderr
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean);
  const fatal = [...lines].reverse().find((l) => /level=(fatal|error)/.test(l)) ?? lines.at(-1) ?? "";
  const m = /msg="((?:[^"\\]|\\.)*)"/.exec(fatal);
  const msg = m ? m[1]!.replace(/\\"/g, '"').replace(/\\\\/g, "\\") : fatal;
  // skopeo prefixes registry answers with this even when the name was fine.
  const answer = msg.replace(/^Error parsing image name "[^"]*": /, "");
  return answer.length > 600 ? `${answer.slice(0, 600)}...` : answer;
}

/**
 * Turns a failed registry operation into a BerthError whose message names the
 * reference and the registry's answer. Credentials are redacted.
 */
export function registryError(
  e: unknown,
  what: { ref: string; registry: string; tool: string; secrets: Array<string | undefined> },
): BerthError {
  if (e instanceof BerthError) return e;
  if (!(e instanceof CommandFailedError)) {
    const msg = redact(e instanceof Error ? e.message : String(e), what.secrets);
    return new BerthError("internal", `pulling ${what.ref} failed: ${msg}`);
  }
  if (e.reason === "spawn") {
    return new BerthError(
      "unavailable",
      `cannot run ${what.tool} to pull ${what.ref}: ${redact(e.stderr, what.secrets)}`,
    );
  }
  if (e.reason === "timeout") {
    return new BerthError("unavailable", `pulling ${what.ref} from ${what.registry} timed out`);
  }
  if (e.reason === "cancelled") {
    return new BerthError("unavailable", `pulling ${what.ref} was cancelled`);
  }
  const answer = redact(skopeoMessage(e.stderr), what.secrets);
  const lower = answer.toLowerCase();
  const details = { ref: what.ref, registry: what.registry };
  if (/unauthorized|authentication required|invalid username\/password|denied/.test(lower)) {
    return new BerthError(
      "registry_auth_failed",
      `registry ${what.registry} refused access to ${what.ref}: ${answer}`,
      details,
    );
  }
  if (/manifest unknown|name unknown|not found|no such image|does not exist/.test(lower)) {
    return new BerthError("not_found", `image ${what.ref} not found: ${answer}`, details);
  }
  if (/http response to https client/.test(lower)) {
    return new BerthError(
      "unavailable",
      `registry ${what.registry} for ${what.ref} speaks plain HTTP; list it in the agent's insecureRegistries to allow that: ${answer}`,
      details,
    );
  }
  if (
    /connection refused|no such host|dial tcp|i\/o timeout|tls|certificate|eof|connection reset|pinging container registry|internal server error|bad gateway|service unavailable/.test(
      lower,
    )
  ) {
    return new BerthError(
      "unavailable",
      `registry ${what.registry} is not reachable for ${what.ref}: ${answer}`,
      details,
    );
  }
  return new BerthError("internal", `pulling ${what.ref} failed: ${answer}`, details);
}
