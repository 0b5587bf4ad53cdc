// The wire contract of the agent tunnel, shared by the agent's TunnelServer
// and the coordinator's ContainerTunnels.
//
//   → CONNECT {containerId}:{port} HTTP/1.1
//     Berth-Connect-Timeout-Ms: 30000        (optional)
//   ← HTTP/1.1 200 Connection Established    then raw bytes both ways
//   ← HTTP/1.1 4xx/5xx, Berth-Error-Code: <shared/errors.ts code>, a one-line text body

import { BerthError, CATALOG, type ErrorCode } from "../shared/errors.ts";

/** How long the agent keeps retrying a refused connection while the container's server starts. */
export const CONNECT_TIMEOUT_HEADER = "berth-connect-timeout-ms";
/** The BerthError code of a refused CONNECT. */
export const ERROR_CODE_HEADER = "berth-error-code";

export const DEFAULT_CONNECT_TIMEOUT_MS = 30_000;
export const MAX_CONNECT_TIMEOUT_MS = 600_000;

/** Container ids as the agent's host names them (ctr-..., or what an edge caller chose). */
const CONTAINER_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

export interface TunnelTarget {
  containerId: string;
  port: number;
}

/** Parses the authority of a CONNECT (`{containerId}:{port}`); the error says what is wrong. */
export function parseTunnelTarget(authority: string | undefined): TunnelTarget | string {
  const raw = authority ?? "";
  const colon = raw.lastIndexOf(":");
  if (colon <= 0) return `CONNECT target ${JSON.stringify(raw)} is not {containerId}:{port}`;
  const containerId = raw.slice(0, colon);
  const portText = raw.slice(colon + 1);
  if (!CONTAINER_ID.test(containerId)) return `${JSON.stringify(containerId)} is not a container id`;
  const port = /^\d{1,5}$/.test(portText) ? Number(portText) : Number.NaN;
  if (!(port >= 1 && port <= 65535)) return `${JSON.stringify(portText)} is not a TCP port (1-65535)`;
  return { containerId, port };
}

/** Reads Berth-Connect-Timeout-Ms; the error says what is wrong. */
export function parseConnectTimeout(value: string | string[] | undefined): number | string {
  if (value === undefined) return DEFAULT_CONNECT_TIMEOUT_MS;
  const text = Array.isArray(value) ? value[0] : value;
  const ms = /^\d{1,9}$/.test(text ?? "") ? Number(text) : Number.NaN;
  if (!(ms >= 0 && ms <= MAX_CONNECT_TIMEOUT_MS)) {
    return `Berth-Connect-Timeout-Ms must be an integer 0..${MAX_CONNECT_TIMEOUT_MS}, got ${JSON.stringify(text)}`;
  }
  return ms;
}

/** The error a refused CONNECT stands for: its code header when it names one, else by status. */
export function tunnelError(status: number, codeHeader: string | undefined, message: string): BerthError {
  const code =
    codeHeader && Object.hasOwn(CATALOG, codeHeader) ? (codeHeader as ErrorCode) : codeForStatus(status);
  return new BerthError(code, message);
}

function codeForStatus(status: number): ErrorCode {
  if (status === 400) return "invalid_request";
  if (status === 404) return "not_found";
  if (status === 403 || status === 409) return "failed_precondition";
  return "unavailable";
}
