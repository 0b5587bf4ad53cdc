import { Readable } from "node:stream";
import { BerthError } from "../../shared/errors.ts";
import type { ObjectRecord, ObjectRepo } from "./store.ts";
import { BlobStore, checkSha256 } from "./blob-store.ts";

/**
 * Objects as workspaces see them: a workspace only finds the objects it
 * uploaded, though two workspaces uploading the same bytes share one blob.
 */
export class Objects {
  readonly blobs: BlobStore;

  constructor(
    private readonly repo: ObjectRepo,
    dataDir: string,
  ) {
    this.blobs = new BlobStore(dataDir);
  }

  /** The workspace's object, when both its row and its bytes are there. */
  async find(workspaceId: string, sha256: string): Promise<ObjectRecord | undefined> {
    checkSha256(sha256);
    const rec = await this.repo.find(workspaceId, sha256);
    if (!rec || !(await this.blobs.has(sha256))) return undefined;
    return rec;
  }

  /** Stores an upload for the workspace; the bytes must hash to `sha256`. */
  async put(
    workspaceId: string,
    sha256: string,
    body: AsyncIterable<Uint8Array> | Readable,
  ): Promise<ObjectRecord> {
    checkSha256(sha256);
    const { size } = await this.blobs.put(body, sha256);
    return this.repo.add(workspaceId, sha256, size);
  }

  /** Stores bytes already in memory (tests, small objects). */
  putBytes(workspaceId: string, sha256: string, bytes: Uint8Array): Promise<ObjectRecord> {
    return this.put(workspaceId, sha256, Readable.from([bytes]));
  }

  has(sha256: string): Promise<boolean> {
    return this.blobs.has(sha256);
  }

  /** The blob's bytes (the container manager streams them to agents). */
  open(sha256: string): Promise<Readable> {
    return this.blobs.open(sha256);
  }

  /** The workspace's object by id; not_found for another workspace's. */
  async byId(workspaceId: string, id: number): Promise<ObjectRecord> {
    const rec = await this.repo.get(id);
    if (!rec || rec.workspaceId !== workspaceId) throw new BerthError("not_found", `object ${id} not found`);
    return rec;
  }
}
