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

  async list(name?: string): Promise<DeploymentJson[]> {
    const q = name !== undefined ? `?name=${encodeURIComponent(name)}` : "";
    return (await this.api.request<{ deployments: DeploymentJson[] }>("GET", `${await this.base()}${q}`))
      .deployments;
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
