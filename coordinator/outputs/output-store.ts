// Outputs (docs/outputs.md): files a task publishes, kept in the
// coordinator's object directory as <root>/<workspace id>/<output id>.data
// with a .json record beside it, and an index per task
// (<root>/<workspace id>/tasks/<task id>/<output id>) so a task's outputs are
// listed without a scan. An upload arrives in chunks written at their offset
// into an upload file, and is renamed into place only when complete and the
// size matches, so a reader never sees a partial output.
//
// A public URL is signed with HMAC-SHA256 over the id and the expiry time;
// asking for one sets the output's expiry, after which the URL answers 404
// and the sweeper deletes the file.

import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, open, readFile, readdir, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { BerthError, invalid } from "../../shared/errors.ts";
import { checkWorkspaceId } from "../../shared/volumes.ts";

export interface OutputRecord {
  id: string;
  workspace_id: string;
  /** The task that saved it; empty when none. */
  task_id: string;
  /** The file name it is served under. */
  name: string;
  size: number;
  created_at: string;
  /** When it is deleted (set by the first public URL); null: kept. */
  expires_at: string | null;
}

/** What a task record lists of an output. */
export type OutputJson = Omit<OutputRecord, "workspace_id" | "task_id">;

/** OutputJson with the stored file's mode and times (Output.stat()). */
export interface OutputStat extends OutputJson {
  mode: string;
  atime: string;
  mtime: string;
}

/** A file's type and permission bits as `ls -l` writes them: "-rw-r--r--". */
export function modeString(mode: number): string {
  const type = (mode & 0o170000) === 0o040000 ? "d" : (mode & 0o170000) === 0o120000 ? "l" : "-";
  let bits = "";
  for (const shift of [6, 3, 0]) {
    const p = (mode >> shift) & 7;
    bits += `${p & 4 ? "r" : "-"}${p & 2 ? "w" : "-"}${p & 1 ? "x" : "-"}`;
  }
  return type + bits;
}

export const MAX_OUTPUT_BYTES = 1024 * 1024 * 1024;
/** Longest expiry a public URL may ask for: 7 days. */
export const MAX_URL_EXPIRES_S = 7 * 24 * 3600;
/** An upload not committed for this long was abandoned (its container died mid-way). */
const ABANDONED_UPLOAD_MS = 3600_000;
const ID_RE = /^out-[0-9a-f]{24}$/;
const UPLOAD_RE = /^up-[0-9a-f]{24}$/;
const TASK_RE = /^[A-Za-z0-9_.:-]{1,200}$/;
// A file name: no path, no control characters.
const NAME_RE = /^[^/\\\0-\x1f]{1,255}$/;

export const checkOutputId = (id: string): string => {
  if (!ID_RE.test(id)) throw new BerthError("not_found", `output ${id} not found`);
  return id;
};

export function checkOutputName(name: unknown): string {
  if (typeof name !== "string" || !NAME_RE.test(name) || name === "." || name === "..") {
    throw invalid(`output name ${JSON.stringify(name)} must be a file name (no '/', 1-255 characters)`, {
      field: "name",
    });
  }
  return name;
}

export const publicView = (r: OutputRecord): OutputJson => ({
  id: r.id,
  name: r.name,
  size: r.size,
  created_at: r.created_at,
  expires_at: r.expires_at,
});

export interface OutputStoreOptions {
  /** The directory outputs live in (shared between coordinators, as objects are). */
  root: string;
  /** 32 bytes or more; the URL signing key. */
  signingKey: Buffer;
  /** Where public URLs point: the coordinator's public URL. */
  publicUrl: string;
  /** @default Date.now */
  clock?: () => number;
}

export class OutputStore {
  private readonly clock: () => number;
  private readonly key: Buffer;

  constructor(private readonly o: OutputStoreOptions) {
    this.clock = o.clock ?? Date.now;
    // A key of its own, derived: a URL signature never doubles as anything sealed with the secrets key.
    this.key = createHmac("sha256", o.signingKey).update("berth output urls v1").digest();
  }

  private wsDir(ws: string): string {
    return join(this.o.root, checkWorkspaceId(ws));
  }
  private uploadPath(ws: string, upload: string): string {
    if (!UPLOAD_RE.test(upload)) throw invalid(`upload ${JSON.stringify(upload)} is not an upload id`);
    return join(this.wsDir(ws), "uploads", upload);
  }
  private dataPath(ws: string, id: string): string {
    return join(this.wsDir(ws), `${checkOutputId(id)}.data`);
  }
  private recordPath(ws: string, id: string): string {
    return join(this.wsDir(ws), `${checkOutputId(id)}.json`);
  }

  /** Starts an upload; chunks go to write(), then commit() makes the output. */
  async begin(ws: string): Promise<string> {
    const upload = `up-${randomBytes(12).toString("hex")}`;
    await mkdir(join(this.wsDir(ws), "uploads"), { recursive: true });
    await writeFile(this.uploadPath(ws, upload), new Uint8Array(), { flag: "wx", mode: 0o600 });
    return upload;
  }

  /** Writes one chunk at its offset (chunks may arrive at any coordinator sharing the root). */
  async write(ws: string, upload: string, offset: number, data: Uint8Array): Promise<void> {
    if (!Number.isSafeInteger(offset) || offset < 0 || offset + data.length > MAX_OUTPUT_BYTES) {
      throw new BerthError("resource_exhausted", `an output may hold at most ${MAX_OUTPUT_BYTES} bytes`);
    }
    let fh: Awaited<ReturnType<typeof open>>;
    try {
      fh = await open(this.uploadPath(ws, upload), "r+");
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT")
        throw new BerthError("not_found", `upload ${upload} not found`);
      throw e;
    }
    try {
      await fh.write(data, 0, data.length, offset);
    } finally {
      await fh.close();
    }
  }

  /** Makes the output from a complete upload of `size` bytes. */
  async commit(
    ws: string,
    upload: string,
    o: { name: string; taskId: string; size: number },
  ): Promise<OutputRecord> {
    const name = checkOutputName(o.name);
    const taskId = o.taskId === "" || TASK_RE.test(o.taskId) ? o.taskId : "";
    const path = this.uploadPath(ws, upload);
    const st = await stat(path).catch(() => undefined);
    if (!st) throw new BerthError("not_found", `upload ${upload} not found`);
    if (st.size !== o.size) {
      await rm(path, { force: true });
      throw invalid(`the upload has ${st.size} bytes where ${o.size} were sent; nothing was saved`);
    }
    const id = `out-${randomBytes(12).toString("hex")}`;
    const rec: OutputRecord = {
      id,
      workspace_id: ws,
      task_id: taskId,
      name,
      size: st.size,
      created_at: new Date(this.clock()).toISOString(),
      expires_at: null,
    };
    await rename(path, this.dataPath(ws, id));
    await writeFile(this.recordPath(ws, id), JSON.stringify(rec), { mode: 0o600 });
    if (taskId) {
      const dir = join(this.wsDir(ws), "tasks", taskId);
      await mkdir(dir, { recursive: true });
      await writeFile(join(dir, id), "");
    }
    return rec;
  }

  /**
   * The output with its stored file's metadata, the fields beta9's
   * Output.stat() has: `mode` ("-rw-------", as `ls -l`), `atime`, `mtime` (ISO 8601).
   */
  async statFile(ws: string, id: string): Promise<OutputStat> {
    const rec = await this.get(ws, id);
    const st = await stat(this.dataPath(ws, id)).catch((e: NodeJS.ErrnoException) => {
      if (e.code === "ENOENT") throw new BerthError("not_found", `output ${id} not found`);
      throw e;
    });
    return {
      ...publicView(rec),
      mode: modeString(st.mode),
      atime: st.atime.toISOString(),
      mtime: st.mtime.toISOString(),
    };
  }

  /** The output, or not_found (also once it has expired, before the sweeper ran). */
  async get(ws: string, id: string): Promise<OutputRecord> {
    let rec: OutputRecord;
    try {
      rec = JSON.parse(await readFile(this.recordPath(ws, id), "utf8")) as OutputRecord;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT")
        throw new BerthError("not_found", `output ${id} not found`);
      throw e;
    }
    if (this.expired(rec)) throw new BerthError("not_found", `output ${id} not found`);
    return rec;
  }

  private expired(r: OutputRecord): boolean {
    return r.expires_at !== null && Date.parse(r.expires_at) <= this.clock();
  }

  /** The outputs a task saved, oldest first (expired ones left out). */
  async ofTask(ws: string, taskId: string): Promise<OutputJson[]> {
    if (!TASK_RE.test(taskId)) return [];
    let ids: string[];
    try {
      ids = await readdir(join(this.wsDir(ws), "tasks", taskId));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return [];
      throw e;
    }
    const out: OutputRecord[] = [];
    for (const id of ids) {
      if (!ID_RE.test(id)) continue;
      try {
        out.push(await this.get(ws, id));
      } catch {
        // Swept or expired between the listing and the read.
      }
    }
    return out.sort((a, b) => a.created_at.localeCompare(b.created_at)).map(publicView);
  }

  /**
   * A URL that serves the output without a token for `expiresS` seconds;
   * the output is deleted then (the latest URL's expiry wins).
   */
  async publicUrl(ws: string, id: string, expiresS: number): Promise<{ url: string; expires_at: string }> {
    if (!Number.isInteger(expiresS) || expiresS < 1 || expiresS > MAX_URL_EXPIRES_S) {
      throw invalid(
        `expires must be a whole number of seconds within 1..${MAX_URL_EXPIRES_S}, got ${expiresS}`,
        {
          field: "expires",
        },
      );
    }
    const rec = await this.get(ws, id);
    const until = Math.floor(this.clock() / 1000) + expiresS;
    rec.expires_at = new Date(until * 1000).toISOString();
    await writeFile(this.recordPath(ws, id), JSON.stringify(rec), { mode: 0o600 });
    const sig = this.sign(ws, id, until);
    const url = `${this.o.publicUrl}/output/${ws}/${id}/${encodeURIComponent(rec.name)}?expires=${until}&sig=${sig}`;
    return { url, expires_at: rec.expires_at };
  }

  private sign(ws: string, id: string, until: number): string {
    return createHmac("sha256", this.key).update(`${ws}\n${id}\n${until}`).digest("hex");
  }

  /**
   * The output a public URL names, when its signature is right and it has
   * not expired: not_found otherwise, whatever the reason (a URL tells no
   * one whether an output ever existed).
   */
  async openSigned(
    ws: string,
    id: string,
    expires: string,
    sig: string,
  ): Promise<{ rec: OutputRecord; stream: Readable }> {
    const gone = new BerthError("not_found", "no such output, or its URL has expired");
    const until = Number(expires);
    if (!/^\d{1,12}$/.test(expires) || !/^[0-9a-f]{64}$/.test(sig) || !ID_RE.test(id)) throw gone;
    try {
      checkWorkspaceId(ws);
    } catch {
      throw gone;
    }
    const want = Buffer.from(this.sign(ws, id, until), "hex");
    if (!timingSafeEqual(want, Buffer.from(sig, "hex")) || until * 1000 <= this.clock()) throw gone;
    const rec = await this.get(ws, id).catch(() => {
      throw gone;
    });
    return { rec, stream: createReadStream(this.dataPath(ws, id)) };
  }

  /** Deletes every expired output's file, record and task index entry (and uploads abandoned for an hour); returns how many outputs. */
  async sweep(): Promise<number> {
    let removed = 0;
    let wss: string[];
    try {
      wss = await readdir(this.o.root);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return 0;
      throw e;
    }
    for (const ws of wss) {
      let names: string[];
      try {
        names = await readdir(join(this.o.root, ws));
      } catch {
        continue;
      }
      await this.sweepUploads(join(this.o.root, ws, "uploads"));
      for (const n of names) {
        if (!n.endsWith(".json")) continue;
        const id = n.slice(0, -".json".length);
        if (!ID_RE.test(id)) continue;
        let rec: OutputRecord;
        try {
          rec = JSON.parse(await readFile(join(this.o.root, ws, n), "utf8")) as OutputRecord;
        } catch {
          continue;
        }
        if (!this.expired(rec)) continue;
        await rm(join(this.o.root, ws, `${id}.data`), { force: true });
        if (rec.task_id) await rm(join(this.o.root, ws, "tasks", rec.task_id, id), { force: true });
        await rm(join(this.o.root, ws, n), { force: true });
        removed++;
      }
    }
    return removed;
  }

  private async sweepUploads(dir: string): Promise<void> {
    let names: string[];
    try {
      names = await readdir(dir);
    } catch {
      return;
    }
    for (const n of names) {
      const st = await stat(join(dir, n)).catch(() => undefined);
      if (st && this.clock() - st.mtimeMs > ABANDONED_UPLOAD_MS) await rm(join(dir, n), { force: true });
    }
  }

  /** Runs sweep() every `everyMs` until the returned stop is called. */
  startSweeper(everyMs: number, onError: (e: unknown) => void): () => void {
    let running = false;
    const timer = setInterval(() => {
      if (running) return;
      running = true;
      this.sweep()
        .catch(onError)
        .finally(() => {
          running = false;
        });
    }, everyMs);
    timer.unref();
    return () => clearInterval(timer);
  }
}
