export {
  type LoadSecretKeyOptions,
  type SecretKey,
  SECRET_KEY_ENV,
  loadSecretKey,
  secretKeyFromBase64,
  secretKeyFromBytes,
} from "./key.ts";
export {
  SECRET_NAME_MAX,
  SECRET_VALUE_MAX_BYTES,
  type SecretInfo,
  SecretService,
  type SecretServiceOptions,
  type Secrets,
  checkSecretName,
  checkSecretValue,
} from "./service.ts";
export { secretRoutes } from "./routes.ts";
export { open, seal } from "./seal.ts";
export { createSecrets, secretsHttpRoutes } from "./area.ts";
