// PutCode/HasCode through the real gRPC server and client, into a real
// CodeStore: chunking over gRPC's message limit, the hash check and the
// refusals arrive as the same BerthErrors the store throws.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { CodeStore } from "../../agent/code/store.ts";
import { AgentRpcClient } from "../../api/grpc/index.ts";
import { startAgentRpcServer } from "../../agent/rpc/server.ts";
import { BerthError } from "../../shared/errors.ts";
import { tempDir } from "../helpers/env.ts";
import { FakeContainerApi } from "../helpers/fake-container-api.ts";
import { chunks, sha256Hex, tarGz } from "../code/tar-builder.ts";
import { FakeAgent } from "./fake-agent.ts";

const isBerth = (code: string, message?: RegExp) => (e: unknown) =>
  e instanceof BerthError && e.code === code && (!message || message.test(e.message));

/** The fake container API with the agent's real code store behind hasCode/putCode. */
class CodeContainers extends FakeContainerApi {
  constructor(readonly store: CodeStore) {
    super();
  }
  override async hasCode(sha256: string): Promise<boolean> {
    return this.store.has(sha256);
  }
  override async putCode(sha256: string, data: AsyncIterable<Uint8Array>): Promise<void> {
    await this.store.put(sha256, data);
  }
}

test("PutCode and HasCode over the unix socket", async (t) => {
  const dir = tempDir(t, "berth-code-rpc-");
  const store = new CodeStore(join(dir, "code"));
  const path = join(dir, "agent.sock");
  const server = await startAgentRpcServer({
    impl: new FakeAgent(),
    containers: new CodeContainers(store),
    unixSocket: path,
  });
  t.after(() => server.close());
  const client = new AgentRpcClient({ address: `unix://${path}` });
  t.after(() => client.close());

  // Random content does not compress: the archive is over gRPC's 4 MiB message limit.
  const blob = randomBytes(6 * 1024 * 1024);
  const archive = tarGz([
    { name: "app.py", data: "def square(x):\n    return x * x\n" },
    { name: "data/blob.bin", data: blob },
  ]);
  const sha = sha256Hex(archive);
  assert.equal(await client.hasCode(sha), false);
  // One 6+ MiB chunk from the caller: the client splits it.
  await client.putCode(sha, chunks(archive, archive.length));
  assert.equal(await client.hasCode(sha), true);
  assert.ok(readFileSync(join(store.dir(sha), "data", "blob.bin")).equals(blob));
  // Already there: answered without the data being needed.
  await client.putCode(sha, chunks(archive, 64 * 1024));

  const claimed = "0".repeat(64);
  await assert.rejects(
    client.putCode(claimed, chunks(archive, 256 * 1024)),
    isBerth("invalid_request", new RegExp(`expected sha256 ${claimed}.*hashes to ${sha}`)),
  );
  const evil = tarGz([{ name: "link", type: "2", linkname: "/etc/shadow" }]);
  await assert.rejects(
    client.putCode(sha256Hex(evil), chunks(evil)),
    isBerth("invalid_request", /"link" is a symbolic link/),
  );
  await assert.rejects(client.hasCode("not-a-hash"), isBerth("invalid_request", /64 hex digits/));
  await assert.rejects(client.putCode("", chunks(evil)), isBerth("invalid_request", /sha256/));
  assert.deepEqual(readdirSync(join(dir, "code")), [sha], "failed puts left nothing");
});

test("an agent without a container host refuses PutCode and HasCode", async (t) => {
  const path = join(tempDir(t), "agent.sock");
  const server = await startAgentRpcServer({ impl: new FakeAgent(), unixSocket: path });
  t.after(() => server.close());
  const client = new AgentRpcClient({ address: `unix://${path}` });
  t.after(() => client.close());
  const unimplemented = isBerth("not_implemented", /does not serve the container API/);
  await assert.rejects(client.hasCode("a".repeat(64)), unimplemented);
  await assert.rejects(client.putCode("a".repeat(64), chunks(Buffer.alloc(3 * 1024 * 1024))), unimplemented);
});
