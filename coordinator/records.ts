import type { Kysely } from "kysely";
import { BotSessionRepo } from "./bots/index.ts";
import { AgentRepo, JoinTokenRepo } from "./fleet/index.ts";
import { ClusterKv } from "./store/index.ts";
import { type Engine, migrateToLatest, openDatabase } from "./store/index.ts";
import { DatabaseRepo } from "./databases/index.ts";
import { DeploymentRepo } from "./deployments/index.ts";
import { InferenceRepo } from "./inference/index.ts";
import { MetricsRepo } from "./metrics/index.ts";
import { LimitsRepo } from "./limits/index.ts";
import { BuiltImageRepo } from "./images/index.ts";
import type { Database } from "./store/index.ts";
import { SandboxRepo } from "./sandboxes/index.ts";
import { StackRepo } from "./stacks/index.ts";
import { ObjectRepo } from "./objects/index.ts";
import { StubRepo } from "./tasks/index.ts";
import { TaskRepo } from "./tasks/index.ts";
import { WebhookRepo } from "./webhooks/index.ts";
import { TokenRepo, WorkspaceRepo } from "./store/index.ts";

/**
 * The coordinator's record of truth, over SQLite or PostgreSQL: one database
 * connection and every area's repository on it (each defined in its area's
 * store.ts). Part of the composition root: it hands each area the
 * repositories it names; no area imports it.
 */
export class Store {
  readonly workspaces: WorkspaceRepo;
  readonly tokens: TokenRepo;
  readonly joinTokens: JoinTokenRepo;
  readonly agents: AgentRepo;
  readonly kv: ClusterKv;
  readonly stubs: StubRepo;
  readonly objects: ObjectRepo;
  readonly tasks: TaskRepo;
  readonly deployments: DeploymentRepo;
  readonly webhooks: WebhookRepo;
  readonly metrics: MetricsRepo;
  readonly limits: LimitsRepo;
  readonly sandboxes: SandboxRepo;
  readonly builtImages: BuiltImageRepo;
  readonly inference: InferenceRepo;
  readonly botSessions: BotSessionRepo;
  readonly databases: DatabaseRepo;
  readonly stacks: StackRepo;

  constructor(
    readonly db: Kysely<Database>,
    readonly engine: Engine,
    readonly display: string,
  ) {
    this.workspaces = new WorkspaceRepo(db);
    this.tokens = new TokenRepo(db);
    this.joinTokens = new JoinTokenRepo(db);
    this.agents = new AgentRepo(db);
    this.kv = new ClusterKv(db);
    this.stubs = new StubRepo(db);
    this.objects = new ObjectRepo(db);
    this.tasks = new TaskRepo(db);
    this.deployments = new DeploymentRepo(db);
    this.webhooks = new WebhookRepo(db);
    this.metrics = new MetricsRepo(db, engine);
    this.limits = new LimitsRepo(db);
    this.sandboxes = new SandboxRepo(db);
    this.builtImages = new BuiltImageRepo(db);
    this.inference = new InferenceRepo(db);
    this.botSessions = new BotSessionRepo(db);
    this.databases = new DatabaseRepo(db);
    this.stacks = new StackRepo(db);
  }

  /** Opens the store at `url` and brings its schema up to date. */
  static async open(url: string): Promise<Store> {
    const { db, engine, display, sqliteFile } = await openDatabase(url);
    try {
      await migrateToLatest(db, sqliteFile);
    } catch (e) {
      await db.destroy().catch(() => {});
      throw e;
    }
    return new Store(db, engine, display);
  }

  close(): Promise<void> {
    return this.db.destroy();
  }
}
