import { Type } from "@sinclair/typebox";

/** The one error shape of the REST API; see docs/api.md. */
export const ErrorResponse = Type.Object({
  error: Type.Object({
    code: Type.String({ description: "stable code from the error catalog" }),
    message: Type.String(),
    details: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
  }),
});
