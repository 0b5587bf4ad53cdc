// The workspaces area's entry point: what other areas may use of it.
export { workspaceRoutes } from "./routes.ts";
