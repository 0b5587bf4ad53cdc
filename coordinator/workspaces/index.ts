// The workspaces area: the workspace and token routes (their records are the store's).
export { workspaceRoutes } from "./routes.ts";
