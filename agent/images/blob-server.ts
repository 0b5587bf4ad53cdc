// The serving side of peer-to-peer layers (peer-blobs.ts): GET and HEAD
// /v1/blobs/sha256:<hex> on the agent's tunnel, whose mutual TLS admits only
// certificates of the cluster CA (agents and coordinators). A blob is served
// from the layout, where it lands only whole and checked; a blob this host is
// still getting is served once it has it. The client checks the digest of
// what it receives in any case.

import { createReadStream, statSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { BLOB_STATE_HEADER, blobDigestOf, type PeerBlobs } from "./peer-blobs.ts";

/** What the server reads: the layout's blobs, and the pulls in progress on this host. */
export interface BlobHolder {
  /** The blob's path in the layout when it is there (whole, checked). */
  blobPath(digest: string): string | undefined;
  peers: Pick<PeerBlobs, "localState" | "localDone">;
}

/** Answers a blob request; false when `req` is not one (the caller answers it). */
export function serveBlob(req: IncomingMessage, res: ServerResponse, holder: BlobHolder): boolean {
  const path = (req.url ?? "").split("?")[0] ?? "";
  const digest = blobDigestOf(path);
  if (digest === undefined || (req.method !== "GET" && req.method !== "HEAD")) return false;
  void answer(req, res, holder, digest).catch(() => res.destroy());
  return true;
}

async function answer(req: IncomingMessage, res: ServerResponse, holder: BlobHolder, digest: string) {
  const held = holder.blobPath(digest);
  if (req.method === "HEAD") {
    const state = held ? "held" : holder.peers.localState(digest);
    res.writeHead(state === "none" ? 404 : 200, { [BLOB_STATE_HEADER]: state });
    res.end();
    return;
  }
  let path = held;
  if (!path && holder.peers.localState(digest) !== "none") {
    // Wait for this host's own pull of it, unless the asking peer goes away first.
    const gone = new Promise<boolean>((r) => res.once("close", () => r(false)));
    if (await Promise.race([holder.peers.localDone(digest), gone])) path = holder.blobPath(digest);
  }
  if (!path) {
    res.writeHead(404, { [BLOB_STATE_HEADER]: "none" });
    res.end();
    return;
  }
  res.writeHead(200, {
    "content-type": "application/octet-stream",
    "content-length": String(statSync(path).size),
    [BLOB_STATE_HEADER]: "held",
  });
  const file = createReadStream(path);
  file.once("error", () => res.destroy());
  res.once("close", () => file.destroy());
  file.pipe(res);
}
