// Which deployment serves a model name (docs/inference.md): an endpoint or
// asgi deployment declares its names (`served_models`, stub extra); a
// workspace sees its own model deployments plus the public catalog, the
// deployments operators published to every workspace. Read from the
// deployment service's memory and indexed, so routing a request costs no
// store read; a name the index misses is looked up once more in a fresh index
// (a deploy a moment ago), which scans memory only.

import type { DeploymentWithStub } from "../deployments/index.ts";
import type { CatalogEntryRow } from "./store.ts";

/** How long the catalog (a store table) is cached: a change on another coordinator shows within this. */
export const CATALOG_CACHE_MS = 5000;

export interface ModelSources {
  /** Latest active version of each deployment (DeploymentService.activeDeployments). */
  activeDeployments(): DeploymentWithStub[];
  /** The published deployments (InferenceRepo.catalog). */
  catalog(): Promise<CatalogEntryRow[]>;
  clock?: () => number;
}

export interface ModelEntry {
  /** The name clients send as `model`. */
  id: string;
  deployment: DeploymentWithStub;
  /** In the public catalog (served for every workspace). */
  public: boolean;
}

const MODEL_KINDS = new Set(["endpoint", "asgi"]);
const baseKind = (kind: string) => kind.split("/")[0] ?? kind;

interface Index {
  at: number;
  /** workspace id → model name → entry */
  own: Map<string, Map<string, ModelEntry>>;
  /** model name → entry (published deployments) */
  published: Map<string, ModelEntry>;
}

/** The model names a deployment declares (stub extra `served_models`, checked by the stub route). */
function servedModels(d: DeploymentWithStub): string[] {
  const v = (d.extra as { served_models?: unknown }).served_models;
  return Array.isArray(v) ? v.filter((n): n is string => typeof n === "string") : [];
}

/** A deployed version beats a serve session; then the newest start. */
const better = (a: DeploymentWithStub, b: DeploymentWithStub): boolean =>
  a.serve !== b.serve ? !a.serve : a.startedAt > b.startedAt;

export class ModelDirectory {
  private index: Index | undefined;
  private catalogRows: { rows: Promise<CatalogEntryRow[]>; at: number } | undefined;
  private readonly clock: () => number;

  constructor(private readonly s: ModelSources) {
    this.clock = s.clock ?? Date.now;
  }

  /** Forgets the cached catalog (after a publish here). */
  catalogChanged(): void {
    this.catalogRows = undefined;
    this.index = undefined;
  }

  /** The workspace's models and the public catalog (a workspace's own name wins); only the catalog without one. */
  async list(workspaceId: string | undefined): Promise<ModelEntry[]> {
    // A listing is never the hot path: always what is deployed now.
    const ix = await this.current("rebuild");
    const out = new Map<string, ModelEntry>(ix.published);
    if (workspaceId) for (const [name, e] of ix.own.get(workspaceId) ?? []) out.set(name, e);
    return [...out.values()].sort((a, b) => a.id.localeCompare(b.id));
  }

  /** The deployment `model` reaches for the workspace: its own first, then the catalog. */
  async find(workspaceId: string, model: string): Promise<ModelEntry | undefined> {
    const look = (ix: Index) => ix.own.get(workspaceId)?.get(model) ?? ix.published.get(model);
    const hit = look(await this.current("cached"));
    if (hit) return hit;
    // A deploy a moment ago: look once more in a fresh index.
    return look(await this.current("rebuild"));
  }

  /** The index: as cached (at most CATALOG_CACHE_MS old), or built now ("rebuild"). */
  private async current(fresh: "cached" | "rebuild"): Promise<Index> {
    const now = this.clock();
    if (fresh === "cached" && this.index && now - this.index.at < CATALOG_CACHE_MS) return this.index;
    const published = new Set((await this.catalog()).map((r) => `${r.workspaceId}\u0000${r.deploymentName}`));
    const own = new Map<string, Map<string, ModelEntry>>();
    const pub = new Map<string, ModelEntry>();
    for (const d of this.s.activeDeployments()) {
      const names = servedModels(d);
      if (!names.length || !MODEL_KINDS.has(baseKind(d.kind))) continue;
      const isPublic = !d.serve && published.has(`${d.workspaceId}\u0000${d.name}`);
      let mine = own.get(d.workspaceId);
      if (!mine) {
        mine = new Map();
        own.set(d.workspaceId, mine);
      }
      for (const id of names) {
        const cur = mine.get(id);
        if (!cur || better(d, cur.deployment)) mine.set(id, { id, deployment: d, public: isPublic });
        if (isPublic) {
          const p = pub.get(id);
          if (!p || better(d, p.deployment)) pub.set(id, { id, deployment: d, public: true });
        }
      }
    }
    this.index = { at: now, own, published: pub };
    return this.index;
  }

  private catalog(): Promise<CatalogEntryRow[]> {
    const now = this.clock();
    if (this.catalogRows && now - this.catalogRows.at < CATALOG_CACHE_MS) return this.catalogRows.rows;
    const rows = this.s.catalog();
    this.catalogRows = { rows, at: now };
    rows.catch(() => {
      if (this.catalogRows?.rows === rows) this.catalogRows = undefined;
    });
    return rows;
  }
}
