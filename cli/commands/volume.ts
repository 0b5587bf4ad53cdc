// `berth volume ...` (docs/volumes.md): the workspace's volumes and moving
// files in and out of them, streamed. On a terminal a progress line is
// redrawn on stderr; off one, one plain line per file when it is done.

import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, readdir, rename, rm, stat } from "node:fs/promises";
import { basename, dirname, join, posix, relative, sep } from "node:path";
import { Readable, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { Command } from "commander";
import { BerthError } from "../../shared/errors.ts";
import { ApiClient } from "../api-client.ts";
import { formatBytes, printJson, printTable } from "../output.ts";

interface VolumeJson {
  name: string;
  size_bytes: number;
  created_at: string;
}
interface EntryJson {
  name: string;
  path: string;
  is_dir: boolean;
  size: number;
  mod_time: string;
}

async function volumesPath(api: ApiClient): Promise<string> {
  const ws = await api.request<{ external_id: string }>("GET", "/api/v1/workspace/current");
  return `/api/v1/volume/${encodeURIComponent(ws.external_id)}`;
}

/** A volume path as URL segments: each component encoded, none empty. */
export function encodeVolumePath(p: string): string {
  return p
    .split("/")
    .filter((c) => c !== "" && c !== ".")
    .map(encodeURIComponent)
    .join("/");
}

/** Counts bytes going through and reports them: a redrawn line on a TTY, nothing otherwise. */
export function progress(label: string, total: number | undefined, err: NodeJS.WriteStream = process.stderr) {
  let done = 0;
  let last = 0;
  const draw = (final: boolean) => {
    if (!err.isTTY) return;
    const now = Date.now();
    if (!final && now - last < 100) return;
    last = now;
    const width = 30;
    const frac = total ? Math.min(1, done / total) : 0;
    const bar = total
      ? `[${"#".repeat(Math.round(frac * width)).padEnd(width, ".")}] ${Math.floor(frac * 100)}% `
      : "";
    err.write(
      `\r${label} ${bar}${formatBytes(done)}${total ? ` / ${formatBytes(total)}` : ""}\x1b[K${final ? "\n" : ""}`,
    );
  };
  return {
    counter: new Transform({
      transform(chunk: Buffer, _enc, cb) {
        done += chunk.length;
        draw(false);
        cb(null, chunk);
      },
    }),
    finish() {
      draw(true);
    },
    get bytes() {
      return done;
    },
  };
}

/** Every regular file under a local path, with the volume path each goes to. */
async function localFiles(local: string, target: string): Promise<{ local: string; remote: string }[]> {
  const st = await stat(local).catch(() => {
    throw new BerthError("invalid_request", `${local}: no such file or directory`);
  });
  if (st.isFile()) return [{ local, remote: target }];
  if (!st.isDirectory())
    throw new BerthError("invalid_request", `${local} is neither a file nor a directory`);
  const out: { local: string; remote: string }[] = [];
  const walk = async (dir: string) => {
    for (const e of await readdir(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) await walk(p);
      else if (e.isFile())
        out.push({ local: p, remote: posix.join(target, relative(local, p).split(sep).join("/")) });
    }
  };
  await walk(local);
  return out;
}

export function volumeCommands(program: Command): void {
  const volume = program.command("volume").description("the workspace's volumes and their files");

  volume
    .command("ls [name] [path]")
    .description("list volumes, or the files of a volume under PATH (default its root)")
    .option("--json", "print JSON")
    .action(async (name: string | undefined, path: string | undefined, o: { json?: boolean }) => {
      const api = ApiClient.fromEnv();
      const base = await volumesPath(api);
      if (name === undefined) {
        const r = await api.request<{ volumes: VolumeJson[] }>("GET", base);
        if (o.json) return printJson(r.volumes);
        printTable(
          r.volumes.map((v) => ({ name: v.name, size: formatBytes(v.size_bytes), created_at: v.created_at })),
          ["name", "size", "created_at"],
        );
        return;
      }
      const q = path ? `?path=${encodeURIComponent(path)}` : "";
      const r = await api.request<{ entries: EntryJson[] }>(
        "GET",
        `${base}/${encodeURIComponent(name)}/ls${q}`,
      );
      if (o.json) return printJson(r.entries);
      printTable(
        r.entries.map((e) => ({
          path: e.is_dir ? `${e.path}/` : e.path,
          size: e.is_dir ? "-" : formatBytes(e.size),
          modified: e.mod_time,
        })),
        ["path", "size", "modified"],
      );
    });

  volume
    .command("create <name>")
    .description("create a volume (volumes are also created on first use)")
    .action(async (name: string) => {
      const api = ApiClient.fromEnv();
      const v = await api.request<VolumeJson>("POST", await volumesPath(api), { name });
      process.stdout.write(`created volume ${v.name}\n`);
    });

  volume
    .command("rm <name>")
    .description("delete a volume and every file in it")
    .action(async (name: string) => {
      const api = ApiClient.fromEnv();
      await api.request("DELETE", `${await volumesPath(api)}/${encodeURIComponent(name)}`);
      process.stdout.write(`deleted volume ${name}\n`);
    });

  volume
    .command("put <name> <local> [path]")
    .description("upload a file or a directory into the volume at PATH (default: its name at the root)")
    .action(async (name: string, local: string, path: string | undefined) => {
      const api = ApiClient.fromEnv();
      const base = `${await volumesPath(api)}/${encodeURIComponent(name)}/files`;
      const target = path ?? basename(local.replace(/\/+$/, ""));
      for (const f of await localFiles(local, target)) {
        const size = (await stat(f.local)).size;
        const p = progress(`${f.local} → ${name}:/${encodeVolumePath(f.remote)}`, size);
        const body = Readable.toWeb(createReadStream(f.local).pipe(p.counter)) as ReadableStream<Uint8Array>;
        const e = await api.uploadStream<EntryJson>(`${base}/${encodeVolumePath(f.remote)}`, body);
        p.finish();
        if (!process.stderr.isTTY)
          process.stdout.write(`uploaded ${f.local} to ${name}:${e.path} (${e.size} bytes)\n`);
      }
    });

  volume
    .command("get <name> <path> [local]")
    .description("download a file of the volume to LOCAL (default: its name here; - for stdout)")
    .action(async (name: string, path: string, local: string | undefined) => {
      const api = ApiClient.fromEnv();
      const url = `${await volumesPath(api)}/${encodeURIComponent(name)}/files/${encodeVolumePath(path)}`;
      const res = await api.download(url);
      const size = Number(res.headers.get("content-length") ?? "") || undefined;
      const src = Readable.fromWeb(res.body as import("node:stream/web").ReadableStream<Uint8Array>);
      if (local === "-") {
        await pipeline(src, process.stdout);
        return;
      }
      const dest = local ?? basename(path);
      const to = (await stat(dest).catch(() => undefined))?.isDirectory() ? join(dest, basename(path)) : dest;
      await mkdir(dirname(to), { recursive: true });
      const tmp = `${to}.berth-partial`;
      const p = progress(`${name}:${path} → ${to}`, size);
      try {
        await pipeline(src, p.counter, createWriteStream(tmp));
        await rename(tmp, to);
      } catch (e) {
        await rm(tmp, { force: true });
        throw e;
      }
      p.finish();
      if (!process.stderr.isTTY)
        process.stdout.write(`downloaded ${name}:${path} to ${to} (${p.bytes} bytes)\n`);
    });
}
