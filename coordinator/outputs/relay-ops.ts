// Containers' Outputs relayed by their agents (docs/outputs.md): the relay
// router (coordinator/streams/) decodes the output wire (shared/outputs.ts)
// and routes its ops here as output.<op>. Chunks of one upload may reach
// different coordinators; each writes at its offset into the shared output
// directory, so none holds upload state.

import { OUTPUT_HEADERS } from "../../shared/outputs.ts";
import type { RelayRouter } from "../streams/index.ts";
import { type OutputStore, publicView } from "./output-store.ts";

/** Registers output.begin, output.chunk, output.commit, output.url and output.stat with the router. */
export function serveOutputOps(router: Pick<RelayRouter, "serve">, store: OutputStore): void {
  router.serve("output.begin", async (c) => ({ upload: await store.begin(c.workspaceId) }));
  router.serve("output.chunk", async (c) => {
    const upload = c.header(OUTPUT_HEADERS.upload);
    await store.write(c.workspaceId, upload, Number(c.header(OUTPUT_HEADERS.offset)), c.data);
    return {};
  });
  router.serve("output.commit", async (c) => {
    const call = c.json();
    const rec = await store.commit(c.workspaceId, String(call.upload ?? ""), {
      name: String(call.name ?? ""),
      taskId: String(call.task_id ?? ""),
      size: Number(call.size),
    });
    return publicView(rec);
  });
  router.serve("output.url", async (c) => {
    const call = c.json();
    return store.publicUrl(c.workspaceId, String(call.id ?? ""), Number(call.expires));
  });
  router.serve("output.stat", async (c) => ({
    ...(await store.statFile(c.workspaceId, String(c.json().id ?? ""))),
  }));
}
