// An error the bridge answers with its own HTTP status: `{error: {code, message}}`.

import type { ErrorCode } from "../../shared/errors.ts";

export class BridgeError extends Error {
  constructor(
    readonly status: number,
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
    this.name = "BridgeError";
  }
}
