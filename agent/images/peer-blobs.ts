// Layer blobs from the other agents of the cluster (docs/images.md, "Layers
// from peers"; docs/design-notes.md, "Peer-to-peer layers"). Before a pull
// fetches a layer from the registry it asks its peers, over mutual TLS with
// the agents' own cluster certificates, what they know of that blob:
//
//   held      the blob is whole in its layout: fetch it from there;
//   fetching  it is committed to getting it (from the registry or a peer):
//             fetch it from there, the answer waits until it has it;
//   deciding  it is asking its peers too, like this agent.
//
// The choice, per layer: a peer that holds it, else one fetching it, else
// the peer deciding with the lowest rank (a hash of digest and agent id)
// when that is lower than this agent's own, else the registry. Deference to
// a deciding peer always goes to a strictly lower rank and deference to a
// committed one to an agent that decided earlier, so no two agents wait on
// each other; agents that start at once all defer to the lowest-ranked, the
// one that fetches from the registry. Whatever a peer sends goes through the
// layer's digest check like registry bytes; a peer that fails, refuses or
// sends bytes that do not match costs a fetch from the registry, the source
// of truth, never the pull.

import { createHash } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { request } from "node:https";
import type { Readable } from "node:stream";
import type { PeerCertificate } from "node:tls";
import { BerthError } from "../../shared/errors.ts";

/** Another agent of the cluster: its id (its certificate's CN) and its tunnel's host:port. */
export interface BlobPeer {
  agentId: string;
  address: string;
}

/** What an agent says of a blob (see the file comment). */
export type BlobState = "held" | "fetching" | "deciding" | "none";

export const BLOB_STATE_HEADER = "x-berth-blob-state";
export const BLOB_PATH_PREFIX = "/v1/blobs/";
const DIGEST_RE = /^sha256:[0-9a-f]{64}$/;

export interface PeerBlobsOptions {
  /** This agent's id: its rank, and never its own peer. */
  self: string;
  /** The cluster's other ready agents, asked once per pull. */
  peers: () => Promise<BlobPeer[]>;
  /** The agent's own certificate (a client certificate to its peers) and the cluster CA. */
  tls: { caPem: string; certPem: string; keyPem: string };
  /** Bound on asking one peer what it knows of a blob. @default 5000 */
  askTimeoutMs?: number;
}

/** Where a pull takes one layer from. */
export type BlobSource = { peer: BlobPeer } | { registry: true };

interface LocalPull {
  state: "deciding" | "fetching";
  done: Promise<boolean>;
  settle: (ok: boolean) => void;
}

/** sha256(digest, agent id): the order in which agents that start at once defer to each other. */
export function blobRank(digest: string, agentId: string): string {
  return createHash("sha256").update(`${digest}\n${agentId}`).digest("hex");
}

export class PeerBlobs {
  /** Blobs a pull on this host is deciding about or fetching now. */
  private readonly local = new Map<string, LocalPull>();

  constructor(private readonly o: PeerBlobsOptions) {}

  /** The other agents, this one left out. */
  async peers(): Promise<BlobPeer[]> {
    return (await this.o.peers()).filter((p) => p.agentId !== this.o.self);
  }

  /** What this host knows of a blob it does not hold: a pull deciding about it or fetching it, or nothing. */
  localState(digest: string): "fetching" | "deciding" | "none" {
    return this.local.get(digest)?.state ?? "none";
  }

  /** Resolves once this host's pull of the blob ended: true when it got it. */
  localDone(digest: string): Promise<boolean> {
    return this.local.get(digest)?.done ?? Promise.resolve(false);
  }

  /**
   * Decides where this host takes `digest` from and records the decision for
   * peers that ask meanwhile; `end(ok)` must follow once the blob is in (or
   * not). Only one pull per host decides about a blob at a time: the layer
   * store coalesces a host's pulls of one layer.
   */
  async acquire(
    digest: string,
    peers: BlobPeer[],
  ): Promise<{ source: BlobSource; end: (ok: boolean) => void }> {
    let settle!: (ok: boolean) => void;
    const done = new Promise<boolean>((r) => {
      settle = r;
    });
    const mine: LocalPull = { state: "deciding", done, settle };
    this.local.set(digest, mine);
    const end = (ok: boolean) => {
      if (this.local.get(digest) === mine) this.local.delete(digest);
      settle(ok);
    };
    try {
      const states = await Promise.all(
        peers.map(async (peer) => ({
          peer,
          state: await this.ask(peer, digest).catch(() => "none" as const),
        })),
      );
      const rank = (p: BlobPeer) => blobRank(digest, p.agentId);
      const lowest = (ps: BlobPeer[]) =>
        ps.reduce<BlobPeer | undefined>((a, p) => (!a || rank(p) < rank(a) ? p : a), undefined);
      const holder = lowest(states.filter((s) => s.state === "held").map((s) => s.peer));
      const fetching = lowest(states.filter((s) => s.state === "fetching").map((s) => s.peer));
      if (holder || fetching) {
        mine.state = "fetching";
        return { source: { peer: (holder ?? fetching) as BlobPeer }, end };
      }
      const deciding = lowest(states.filter((s) => s.state === "deciding").map((s) => s.peer));
      if (deciding && rank(deciding) < blobRank(digest, this.o.self))
        return { source: { peer: deciding }, end };
      mine.state = "fetching";
      return { source: { registry: true }, end };
    } catch (e) {
      end(false);
      throw e;
    }
  }

  /** What `peer` says of `digest` (HEAD). */
  ask(peer: BlobPeer, digest: string): Promise<BlobState> {
    return new Promise((resolve, reject) => {
      const req = this.request(peer, "HEAD", digest, (res) => {
        res.resume();
        const s = res.headers[BLOB_STATE_HEADER];
        resolve(
          res.statusCode === 200 && (s === "held" || s === "fetching" || s === "deciding") ? s : "none",
        );
      });
      req.setTimeout(this.o.askTimeoutMs ?? 5000, () => req.destroy(new Error("no answer in time")));
      req.once("error", reject);
      req.end();
    });
  }

  /**
   * The blob's bytes from `peer` (GET; a peer still getting it answers once
   * it has it). Throws when it does not have it after all; the caller checks
   * the digest of what arrives.
   */
  open(peer: BlobPeer, digest: string, signal?: AbortSignal): Promise<Readable> {
    return new Promise((resolve, reject) => {
      const req = this.request(peer, "GET", digest, (res) => {
        if (res.statusCode === 200) return resolve(res);
        res.resume();
        reject(
          new BerthError("not_found", `agent ${peer.agentId} has no blob ${digest} (HTTP ${res.statusCode})`),
        );
      });
      const abort = () => req.destroy(new BerthError("cancelled", "the pull was cancelled"));
      signal?.addEventListener("abort", abort, { once: true });
      req.once("close", () => signal?.removeEventListener("abort", abort));
      req.once("error", reject);
      req.end();
    });
  }

  private request(
    peer: BlobPeer,
    method: string,
    digest: string,
    onResponse: (res: IncomingMessage) => void,
  ) {
    if (!DIGEST_RE.test(digest)) throw new BerthError("invalid_request", `${digest} is not a sha256 digest`);
    const { host, port } = splitAddress(peer.address);
    return request(
      {
        host,
        port,
        method,
        path: `${BLOB_PATH_PREFIX}${digest}`,
        ca: this.o.tls.caPem,
        cert: this.o.tls.certPem,
        key: this.o.tls.keyPem,
        // Peers are reached by address; who answers is the agent the cluster CA named.
        checkServerIdentity: (_host: string, cert: PeerCertificate) =>
          cert.subject?.CN === peer.agentId
            ? undefined
            : new Error(`the peer at ${peer.address} is ${cert.subject?.CN}, not agent ${peer.agentId}`),
        agent: false,
      },
      onResponse,
    );
  }
}

/** "host:port" or "[v6]:port". */
function splitAddress(address: string): { host: string; port: number } {
  const m = /^\[?([^\]]+?)\]?:(\d+)$/.exec(address);
  if (!m) throw new BerthError("invalid_request", `peer address ${JSON.stringify(address)} is not host:port`);
  return { host: m[1] as string, port: Number(m[2]) };
}

/** Whether a request path names a blob: its digest, or undefined. */
export function blobDigestOf(path: string): string | undefined {
  if (!path.startsWith(BLOB_PATH_PREFIX)) return undefined;
  const digest = path.slice(BLOB_PATH_PREFIX.length);
  return DIGEST_RE.test(digest) ? digest : undefined;
}
