// The secrets area (docs/secrets.md): sealed workspace secrets and their routes.
import type { Area, AreaRoutes } from "../http/index.ts";
import { secretRoutes } from "./routes.ts";
import { type Secrets, SecretService, type SecretServiceOptions } from "./service.ts";

export function secretsHttpRoutes(secrets: Secrets): AreaRoutes {
  return { api: [secretRoutes(secrets)] };
}

export function createSecrets(o: SecretServiceOptions): Area<SecretService> {
  const secrets = new SecretService(o);
  return { service: secrets, routes: secretsHttpRoutes(secrets) };
}
