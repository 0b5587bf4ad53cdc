import type { ApiClient } from "../api-client.ts";
import type { DeploymentJson } from "./publish.ts";

/** The deployment REST routes of the token's own workspace, its id fetched once per client. */
export class DeploymentRoutes {
  private ws?: Promise<string>;

  constructor(readonly api: ApiClient) {}

  private async base(): Promise<string> {
    this.ws ??= this.api
      .request<{ external_id: string }>("GET", "/api/v1/workspace/current")
      .then((w) => w.external_id);
    // A failed lookup is not cached: the next call asks again.
    this.ws.catch(() => (this.ws = undefined));
    return `/api/v1/deployment/${encodeURIComponent(await this.ws)}`;
  }

  /** Every deployment, following the list's cursor pages. */
  async list(name?: string): Promise<DeploymentJson[]> {
    const out: DeploymentJson[] = [];
    let cursor: string | null = null;
    do {
      const q = new URLSearchParams({ limit: "500" });
      if (name !== undefined) q.set("name", name);
      if (cursor) q.set("cursor", cursor);
      const page: { deployments: DeploymentJson[]; next_cursor: string | null } = await this.api.request(
        "GET",
        `${await this.base()}?${q}`,
      );
      out.push(...page.deployments);
      cursor = page.next_cursor;
    } while (cursor);
    return out;
  }

  async get(id: string): Promise<DeploymentJson & { containers?: number; queue_depth?: number }> {
    return this.api.request("GET", `${await this.base()}/${encodeURIComponent(id)}`);
  }

  async stop(id: string): Promise<DeploymentJson> {
    return this.api.request("POST", `${await this.base()}/stop/${encodeURIComponent(id)}`);
  }

  async start(id: string): Promise<DeploymentJson> {
    return this.api.request("POST", `${await this.base()}/start/${encodeURIComponent(id)}`);
  }

  async delete(id: string): Promise<void> {
    await this.api.request("DELETE", `${await this.base()}/${encodeURIComponent(id)}`);
  }
}
