// `berth queue`, `berth map`, `berth signal` (docs/queues.md): inspect and
// manage the workspace's Queues, Maps and Signals through the REST routes.
// Values are the SDK's pickles, which the CLI does not open: it shows names,
// sizes and keys.

import type { Command } from "commander";
import { ApiClient } from "../api-client.ts";
import { printJson, printTable } from "../output.ts";

interface Sized {
  name: string;
  size: number;
}
interface SignalJson {
  name: string;
  set: boolean;
  revision: number;
  expires_at: string | null;
}

/** `/api/v1/{kind}/{ws}` of the token's own workspace, with the name when given. */
async function pathOf(api: ApiClient, kind: "queue" | "map" | "signal", name?: string): Promise<string> {
  const ws = await api.request<{ external_id: string }>("GET", "/api/v1/workspace/current");
  const base = `/api/v1/${kind}/${encodeURIComponent(ws.external_id)}`;
  return name === undefined ? base : `${base}/${encodeURIComponent(name)}`;
}

const rows = (v: unknown) => v as Record<string, unknown>[];

export function stateCommands(program: Command): void {
  const queue = program.command("queue").description("the workspace's Queues (Queue(name) in the SDK)");
  queue
    .command("ls")
    .description("list the queues that hold items, with their sizes")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const api = ApiClient.fromEnv();
      const r = await api.request<{ queues: Sized[] }>("GET", await pathOf(api, "queue"));
      if (o.json) printJson(r.queues);
      else printTable(rows(r.queues), ["name", "size"]);
    });
  queue
    .command("get")
    .description("show one queue's size")
    .argument("<name>", "queue name")
    .option("--json", "print JSON")
    .action(async (name: string, o: { json?: boolean }) => {
      const api = ApiClient.fromEnv();
      const r = await api.request<Sized>("GET", await pathOf(api, "queue", name));
      if (o.json) printJson(r);
      else process.stdout.write(`queue ${r.name}: ${r.size} item${r.size === 1 ? "" : "s"}\n`);
    });
  queue
    .command("rm")
    .description("delete a queue and every item in it")
    .argument("<name>", "queue name")
    .action(async (name: string) => {
      const api = ApiClient.fromEnv();
      const r = await api.request<{ deleted: number }>("DELETE", await pathOf(api, "queue", name));
      process.stdout.write(`deleted queue ${name} (${r.deleted} items)\n`);
    });

  const map = program.command("map").description("the workspace's Maps (Map(name) in the SDK)");
  map
    .command("ls")
    .description("list the maps that hold keys, with their sizes")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const api = ApiClient.fromEnv();
      const r = await api.request<{ maps: Sized[] }>("GET", await pathOf(api, "map"));
      if (o.json) printJson(r.maps);
      else printTable(rows(r.maps), ["name", "size"]);
    });
  map
    .command("get")
    .description("list one map's keys")
    .argument("<name>", "map name")
    .option("--json", "print JSON")
    .action(async (name: string, o: { json?: boolean }) => {
      const api = ApiClient.fromEnv();
      const r = await api.request<Sized & { keys: string[] }>("GET", await pathOf(api, "map", name));
      if (o.json) printJson(r);
      else {
        process.stdout.write(`map ${r.name}: ${r.size} key${r.size === 1 ? "" : "s"}\n`);
        for (const k of r.keys) process.stdout.write(`${JSON.stringify(k)}\n`);
      }
    });
  map
    .command("rm")
    .description("delete a map and every key in it")
    .argument("<name>", "map name")
    .action(async (name: string) => {
      const api = ApiClient.fromEnv();
      const r = await api.request<{ deleted: number }>("DELETE", await pathOf(api, "map", name));
      process.stdout.write(`deleted map ${name} (${r.deleted} keys)\n`);
    });

  const signal = program.command("signal").description("the workspace's Signals (Signal(name) in the SDK)");
  signal
    .command("ls")
    .description("list the signals that are set")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const api = ApiClient.fromEnv();
      const r = await api.request<{ signals: SignalJson[] }>("GET", await pathOf(api, "signal"));
      if (o.json) printJson(r.signals);
      else printTable(rows(r.signals), ["name", "expires_at"]);
    });
  signal
    .command("set")
    .description("set a signal: handlers in the workspace's running containers fire")
    .argument("<name>", "signal name")
    .option("--ttl <seconds>", "how long it stays set (1 to 86400)", "600")
    .action(async (name: string, o: { ttl: string }) => {
      const api = ApiClient.fromEnv();
      const ttl = Number(o.ttl);
      const r = await api.request<SignalJson>("POST", `${await pathOf(api, "signal", name)}/set`, { ttl });
      process.stdout.write(`set signal ${r.name} until ${r.expires_at}\n`);
    });
  signal
    .command("clear")
    .description("clear a signal")
    .argument("<name>", "signal name")
    .action(async (name: string) => {
      const api = ApiClient.fromEnv();
      await api.request("POST", `${await pathOf(api, "signal", name)}/clear`);
      process.stdout.write(`cleared signal ${name}\n`);
    });
}
