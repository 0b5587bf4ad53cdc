import { readFile } from "node:fs/promises";
import type { Command } from "commander";
import { BerthError, describeError } from "../../shared/errors.ts";
import { ApiClient } from "../api-client.ts";
import { printJson, printTable } from "../output.ts";

interface SecretJson {
  name: string;
  created_at: string;
  updated_at: string;
}

/** `/api/v1/secret/{ws}` of the token's own workspace. */
async function secretsPath(api: ApiClient): Promise<string> {
  const ws = await api.request<{ external_id: string }>("GET", "/api/v1/workspace/current");
  return `/api/v1/secret/${encodeURIComponent(ws.external_id)}`;
}

async function readAll(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(Buffer.isBuffer(c) ? c : Buffer.from(c));
  return Buffer.concat(chunks);
}

/**
 * The value from the command line or, with --from-file, from a file or
 * stdin (`-`), byte for byte: a trailing newline stays part of the value.
 */
export async function secretValue(
  name: string,
  value: string | undefined,
  fromFile: string | undefined,
  stdin: NodeJS.ReadableStream = process.stdin,
): Promise<string> {
  if (value !== undefined && fromFile !== undefined) {
    throw new BerthError(
      "invalid_request",
      `give the value of ${name} either as an argument or with --from-file, not both`,
    );
  }
  if (fromFile === undefined) {
    if (value === undefined) {
      throw new BerthError(
        "invalid_request",
        `give the value of ${name} as an argument or with --from-file PATH (- for stdin)`,
      );
    }
    return value;
  }
  let bytes: Buffer;
  try {
    bytes = fromFile === "-" ? await readAll(stdin) : await readFile(fromFile);
  } catch (e) {
    throw new BerthError(
      "invalid_request",
      `cannot read the value of ${name} from ${fromFile}: ${describeError(e)}`,
    );
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new BerthError(
      "invalid_request",
      `the value of ${name} from ${fromFile === "-" ? "stdin" : fromFile} is not UTF-8 text (encode binary values, e.g. with base64)`,
    );
  }
}

export function secretCommands(program: Command): void {
  const secret = program
    .command("secret")
    .description("secrets of the current workspace, injected as environment variables (secrets=[...])");
  secret
    .command("create")
    .description("create a secret; its value is never shown again")
    .argument("<name>", "environment variable name, e.g. HF_TOKEN")
    .argument("[value]", "the value (or use --from-file, which keeps it off the command line)")
    .option("--from-file <path>", "read the value from a file, byte for byte; - reads stdin")
    .action(async (name: string, value: string | undefined, o: { fromFile?: string }) => {
      const v = await secretValue(name, value, o.fromFile);
      const api = ApiClient.fromEnv();
      const s = await api.request<SecretJson>("POST", await secretsPath(api), { name, value: v });
      process.stdout.write(`created secret ${s.name}\n`);
    });
  secret
    .command("update")
    .description("replace a secret's value; containers started from now on get the new one")
    .argument("<name>", "secret name")
    .argument("[value]", "the new value (or use --from-file)")
    .option("--from-file <path>", "read the value from a file, byte for byte; - reads stdin")
    .action(async (name: string, value: string | undefined, o: { fromFile?: string }) => {
      const v = await secretValue(name, value, o.fromFile);
      const api = ApiClient.fromEnv();
      const s = await api.request<SecretJson>(
        "PUT",
        `${await secretsPath(api)}/${encodeURIComponent(name)}`,
        { value: v },
      );
      process.stdout.write(`updated secret ${s.name}\n`);
    });
  secret
    .command("list")
    .description("list the workspace's secrets (names and times, never values)")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const api = ApiClient.fromEnv();
      const r = await api.request<{ secrets: SecretJson[] }>("GET", await secretsPath(api));
      if (o.json) printJson(r.secrets);
      else
        printTable(r.secrets as unknown as Record<string, unknown>[], ["name", "created_at", "updated_at"]);
    });
  secret
    .command("delete")
    .description("delete a secret; running containers keep the value they started with")
    .argument("<name>", "secret name")
    .action(async (name: string) => {
      const api = ApiClient.fromEnv();
      await api.request("DELETE", `${await secretsPath(api)}/${encodeURIComponent(name)}`);
      process.stdout.write(`deleted secret ${name}\n`);
    });
}
