// `berth db`: managed PostgreSQL and Redis databases of the current workspace
// (docs/databases.md), over /api/v1/database/{ws}. No command prints a
// password: the connection URL lives in the workspace secret the answer names.

import type { Command } from "commander";
import type { DatabaseView } from "../../shared/databases.ts";
import { ApiClient } from "../api-client.ts";
import { printJson, printTable } from "../output.ts";


/** A create or start waits for the image build (first time) and the readiness check. */
const READY_TIMEOUT_MS = 20 * 60_000;

async function databasesPath(api: ApiClient): Promise<string> {
  const ws = await api.request<{ external_id: string }>("GET", "/api/v1/workspace/current");
  return `/api/v1/database/${encodeURIComponent(ws.external_id)}`;
}

const COLUMNS = ["name", "engine", "status", "secret_name", "volume", "local_port", "agent_id", "error"];

function printOne(d: DatabaseView, json: boolean | undefined, verb: string): void {
  if (json) {
    printJson(d);
    return;
  }
  process.stdout.write(`${verb} ${d.engine} database ${d.name}: ${d.status}\n`);
  if (d.status === "running")
    process.stdout.write(
      `  functions connect with the URL in secret ${d.secret_name} (secrets=["${d.secret_name}"]), ${d.host}:${d.local_port} in their container\n`,
    );
}

export function dbCommands(program: Command): void {
  const db = program
    .command("db")
    .description("managed PostgreSQL and Redis databases of the current workspace (docs/databases.md)");
  db.command("create")
    .description(
      "run a database as a pod, its data on a volume, its URL in the secret DB_<NAME>_URL; waits until ready",
    )
    .argument("<engine>", "postgres or redis")
    .argument("<name>", "1-40 lower-case letters, digits or '-', starting with a letter")
    .option("--cpu <cores>", "CPU cores of the pod (default 1)", Number)
    .option("--memory <mib>", "memory of the pod in MiB (default 1024)", Number)
    .option("--json", "print JSON")
    .action(async (engine: string, name: string, o: { cpu?: number; memory?: number; json?: boolean }) => {
      const api = ApiClient.fromEnv();
      if (!o.json)
        process.stderr.write(`creating ${engine} database ${name} (the first one builds its image)…\n`);
      const d = await api.request<DatabaseView>(
        "POST",
        await databasesPath(api),
        {
          engine,
          name,
          ...(o.cpu !== undefined ? { cpu: o.cpu } : {}),
          ...(o.memory !== undefined ? { memory: o.memory } : {}),
        },
        { timeoutMs: READY_TIMEOUT_MS },
      );
      printOne(d, o.json, "created");
    });
  db.command("list")
    .description("list the workspace's databases")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const api = ApiClient.fromEnv();
      const r = await api.request<{ databases: DatabaseView[] }>("GET", await databasesPath(api));
      if (o.json) printJson(r.databases);
      else printTable(r.databases as unknown as Record<string, unknown>[], COLUMNS);
    });
  db.command("get")
    .description("one database")
    .argument("<name>", "database name")
    .option("--json", "print JSON")
    .action(async (name: string, o: { json?: boolean }) => {
      const api = ApiClient.fromEnv();
      const d = await api.request<DatabaseView>(
        "GET",
        `${await databasesPath(api)}/${encodeURIComponent(name)}`,
      );
      if (o.json) printJson(d);
      else printTable([d as unknown as Record<string, unknown>], COLUMNS);
    });
  for (const [action, what] of [
    ["start", "start a stopped database again (same data); waits until ready"],
    ["stop", "stop the database's pod; the data and the secret stay"],
    ["restart", "stop and start the database (same data); waits until ready"],
  ] as const) {
    db.command(action)
      .description(what)
      .argument("<name>", "database name")
      .option("--json", "print JSON")
      .action(async (name: string, o: { json?: boolean }) => {
        const api = ApiClient.fromEnv();
        const d = await api.request<DatabaseView>(
          "POST",
          `${await databasesPath(api)}/${encodeURIComponent(name)}/${action}`,
          undefined,
          { timeoutMs: READY_TIMEOUT_MS },
        );
        printOne(d, o.json, action === "stop" ? "stopped" : action === "start" ? "started" : "restarted");
      });
  }
  db.command("delete")
    .description(
      "delete the database; its volume and secret stay (a create of the same name finds the data) unless --delete-data",
    )
    .argument("<name>", "database name")
    .option("--delete-data", "also delete its volume (the data) and its secret")
    .action(async (name: string, o: { deleteData?: boolean }) => {
      const api = ApiClient.fromEnv();
      await api.request(
        "DELETE",
        `${await databasesPath(api)}/${encodeURIComponent(name)}${o.deleteData ? "?delete_data=true" : ""}`,
      );
      process.stdout.write(`deleted database ${name}${o.deleteData ? " and its data" : " (data kept)"}\n`);
    });
}
