// The container RPCs end to end over both transports (unix socket, TCP with
// mutual TLS) against an in-memory ContainerApi: what the client sends is what
// the implementation receives, and what it answers is what the client gets.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import * as grpc from "@grpc/grpc-js";
import { AgentRpcClient } from "../../agent/rpc/client.ts";
import type {
  ContainerStatus,
  ExecOutput,
  LogEntry,
  RunContainerRequest,
} from "../../agent/rpc/container-api.ts";
import { type AgentRpcServer, startAgentRpcServer } from "../../agent/rpc/server.ts";
import { ClusterPki, type SecretStore } from "../../coordinator/pki/cluster-pki.ts";
import type { EgressPolicy } from "../../shared/egress.ts";
import { BerthError } from "../../shared/errors.ts";
import { waitFor } from "../../shared/net.ts";
import { tempDir } from "../helpers/env.ts";
import { FakeAgent } from "./fake-agent.ts";
import { FakeContainers, sampleImage, sampleStatus } from "./fake-containers.ts";

const isBerth = (code: string, message?: RegExp) => (e: unknown) =>
  e instanceof BerthError && e.code === code && (!message || message.test(e.message));

function memoryStore(): SecretStore {
  const m = new Map<string, string>();
  return { get: async (k) => m.get(k), put: async (k, v) => void m.set(k, v) };
}

const fullRequest: RunContainerRequest = {
  id: "ctr-full",
  image: "docker.io/library/python:3.12-slim",
  imageCredentials: { username: "bot", password: "s3cret" },
  args: ["python", "-c", "print('hi')", ""],
  env: { A: "1", EMPTY: "", "WITH=EQ": "x=y", UNICODE: "héllo ✓" },
  cwd: "/work",
  user: "1000:1000",
  hostname: "box",
  cpu: 1.25,
  memoryBytes: 5 * 1024 ** 3 + 7,
  pidsLimit: 512,
  gpu: { count: 2, types: ["H100", "A100"] },
  egress: { mode: "allow", cidrs: ["10.0.0.0/8", "2001:db8::/32"] },
  exposedPorts: [8080, 65535],
  mounts: [
    { source: "/srv/data", destination: "/data", readOnly: true },
    { source: "/srv/cache", destination: "/cache" },
  ],
  timeoutMs: 3_600_000,
  labels: { app: "web", "berth.dev/sandbox": "sb-1" },
  startupWindowMs: 30_000,
  code: { sha256: "ab".repeat(32) },
  runner: {
    stubId: "stub-1",
    workspaceId: "ws-1",
    stubType: "function",
    handler: "app:square",
    onStart: "app:load",
    pythonVersion: "python3.11",
    callbackUrl: "https://example.test/cb",
    retryFor: ["ValueError", "mymod.Flaky"],
    workers: 2,
  },
};

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

function joined(chunks: ExecOutput[], stream: "stdout" | "stderr"): Buffer {
  return Buffer.concat(chunks.filter((c) => c.stream === stream).map((c) => c.data));
}

interface Harness {
  client: AgentRpcClient;
  fake: FakeContainers;
}

interface Setup {
  client: AgentRpcClient;
  server: AgentRpcServer;
  cleanup?: () => void;
}

function containerSuite(name: string, setup: (fake: FakeContainers) => Promise<Setup>) {
  describe(`container RPCs over ${name}`, () => {
    const h = {} as Harness;
    let s: Setup | undefined;
    before(async () => {
      h.fake = new FakeContainers();
      s = await setup(h.fake);
      h.client = s.client;
    });
    after(async () => {
      s?.client.close();
      await s?.server.close();
      s?.cleanup?.();
    });

    test("RunContainer carries every field, and absent ones stay absent", async () => {
      const { client, fake } = h;
      const status = await client.runContainer(fullRequest);
      assert.deepEqual(fake.lastCall("runContainer"), [fullRequest]);
      assert.deepEqual(status, fake.statuses.get("ctr-full"));

      const minimal: RunContainerRequest = { args: [], cpu: 0.1, memoryBytes: 1 };
      await client.runContainer(minimal);
      assert.deepEqual(fake.lastCall("runContainer"), [minimal]);
    });

    test("a request the wire cannot carry is refused before it is sent", async () => {
      const { client, fake } = h;
      const before = fake.calls.length;
      await assert.rejects(
        client.runContainer({ args: [], cpu: 1, memoryBytes: -1 }),
        isBerth("invalid_request", /memoryBytes must be an integer/),
      );
      await assert.rejects(
        client.runContainer({ args: [], cpu: 1, memoryBytes: 1, exposedPorts: [70000] }),
        isBerth("invalid_request", /exposedPorts\[0\]/),
      );
      assert.equal(fake.calls.length, before);
    });

    test("container statuses round-trip with every exit reason and optional field", async () => {
      const { client, fake } = h;
      const variants: ContainerStatus[] = [
        sampleStatus("ctr-created", { state: "created", pid: 0, startedAt: undefined }),
        sampleStatus("ctr-gpu", {
          gpus: ["GPU-aaaa", "MIG-bbbb"],
          ipv6: "fd00::2",
          egress: { mode: "block" },
          exposedPorts: [22, 8080],
        }),
        ...(["exited", "oom_killed", "killed", "timed_out", "unknown"] as const).map((reason, i) =>
          sampleStatus(`ctr-${reason}`, {
            state: "stopped",
            exitedAt: 1_700_000_001_000 + i,
            exitCode: reason === "exited" ? 0 : 137,
            reason,
            egress: { mode: "allow", cidrs: ["192.168.0.0/16"] },
          }),
        ),
        sampleStatus("ctr-negative", { state: "stopped", exitCode: -1, reason: "unknown", labels: {} }),
      ];
      for (const v of variants) {
        if (v.startedAt === undefined) delete v.startedAt;
        fake.statuses.set(v.id, v);
      }
      for (const v of variants) assert.deepEqual(await client.getContainer(v.id), v);

      const web = await client.listContainers({ labels: { app: "web" } });
      assert.deepEqual(fake.lastCall("listContainers"), [{ labels: { app: "web" } }]);
      assert.ok(web.length > 0 && web.every((s) => s.labels.app === "web"));
      assert.ok(!web.some((s) => s.id === "ctr-negative"));
      const all = await client.listContainers();
      assert.deepEqual(fake.lastCall("listContainers"), [undefined]);
      assert.deepEqual(all, [...fake.statuses.values()]);
    });

    test("StopContainer passes grace and remove, or nothing", async () => {
      const { client, fake } = h;
      await client.runContainer({ id: "ctr-stop", args: [], cpu: 1, memoryBytes: 1024 });
      const stopped = await client.stopContainer("ctr-stop", { graceMs: 2500, remove: false });
      assert.deepEqual(fake.lastCall("stopContainer"), ["ctr-stop", { graceMs: 2500, remove: false }]);
      assert.equal(stopped.state, "stopped");
      assert.equal(stopped.reason, "killed");
      assert.equal(stopped.exitCode, 143);
      await client.stopContainer("ctr-stop");
      assert.deepEqual(fake.lastCall("stopContainer"), ["ctr-stop", {}]);
      await client.stopContainer("ctr-stop", { remove: true });
      assert.deepEqual(fake.lastCall("stopContainer"), ["ctr-stop", { remove: true }]);
      await assert.rejects(client.getContainer("ctr-stop"), isBerth("not_found"));
    });

    test("SetNetworkPolicy carries each egress variant both ways", async () => {
      const { client, fake } = h;
      await client.runContainer({ id: "ctr-net", args: [], cpu: 1, memoryBytes: 1024 });
      const policies: EgressPolicy[] = [
        { mode: "block" },
        { mode: "allow", cidrs: ["10.1.0.0/16", "fd00::/8"] },
        { mode: "open" },
      ];
      for (const policy of policies) {
        const s = await client.setNetworkPolicy("ctr-net", policy);
        assert.deepEqual(fake.lastCall("setNetworkPolicy"), ["ctr-net", policy]);
        assert.deepEqual(s.egress, policy);
      }
      // The agent checks CIDRs by the public API's rules.
      await assert.rejects(
        client.setNetworkPolicy("ctr-net", { mode: "allow", cidrs: ["example.com/8"] }),
        isBerth("invalid_request", /not in CIDR notation/),
      );
    });

    test("ExposePort carries id and port and answers the container; bad ports never leave the client", async () => {
      const { client, fake } = h;
      await client.runContainer({ id: "ctr-port", args: [], cpu: 1, memoryBytes: 1024 });
      const s = await client.exposePort("ctr-port", 8000);
      assert.deepEqual(fake.lastCall("exposePort"), ["ctr-port", 8000]);
      assert.deepEqual(s.exposedPorts, [8000]);
      assert.deepEqual((await client.exposePort("ctr-port", 65535)).exposedPorts, [8000, 65535]);
      const calls = fake.calls.length;
      for (const bad of [0, -1, 65536, 80.5]) {
        await assert.rejects(client.exposePort("ctr-port", bad), isBerth("invalid_request", /1\.\.65535/));
      }
      assert.equal(fake.calls.length, calls, "refused before it was sent");
      await assert.rejects(client.exposePort("ctr-none", 8000), isBerth("not_found"));
    });

    test("images: pull with credentials, list, remove", async () => {
      const { client, fake } = h;
      assert.deepEqual(
        await client.pullImage("python:3.12-slim", { credentials: { username: "u", password: "p" } }),
        sampleImage,
      );
      assert.deepEqual(fake.lastCall("pullImage"), [
        "python:3.12-slim",
        { credentials: { username: "u", password: "p" } },
      ]);
      await client.pullImage("python:3.12-slim");
      assert.deepEqual(fake.lastCall("pullImage"), ["python:3.12-slim", undefined]);
      assert.deepEqual(await client.listImages(), [sampleImage]);
      await client.removeImage("python:3.12-slim");
      assert.deepEqual(fake.lastCall("removeImage"), ["python:3.12-slim"]);
      assert.deepEqual(await client.listImages(), []);
      await assert.rejects(
        client.removeImage("python:3.12-slim"),
        isBerth("not_found", /image python:3.12-slim/),
      );
      fake.images = [sampleImage];
    });

    test("ImportImage carries path, name and kind; GcImages carries unusedForMs and the result", async () => {
      const { client, fake } = h;
      const imported = await client.importImage({
        path: "/srv/images/app.tar",
        name: "app:1",
        kind: "oci-archive",
      });
      assert.deepEqual(fake.lastCall("importImage"), [
        { path: "/srv/images/app.tar", name: "app:1", kind: "oci-archive" },
      ]);
      assert.deepEqual(imported, fake.images.at(-1));
      for (const kind of ["auto", "docker-archive", "rootfs"] as const) {
        await client.importImage({ path: "/srv/x", name: "x:1", kind });
        assert.deepEqual(fake.lastCall("importImage"), [{ path: "/srv/x", name: "x:1", kind }]);
      }
      await client.importImage({ path: "/srv/y", name: "y:1" });
      assert.deepEqual(fake.lastCall("importImage"), [{ path: "/srv/y", name: "y:1", kind: "auto" }]);
      await assert.rejects(
        client.importImage({ path: "rel/app.tar", name: "app:1" }),
        isBerth("invalid_request", /rel\/app.tar is relative/),
      );
      await assert.rejects(
        // biome-ignore lint/suspicious/noExplicitAny: a kind the type forbids, as a JS caller could send
        client.importImage({ path: "/a", name: "a", kind: "zip" as any }),
        isBerth("invalid_request", /import kind zip/),
      );

      assert.deepEqual(await client.gcImages(), { removedImages: [], freedBytes: 0 });
      assert.deepEqual(fake.lastCall("gcImages"), [{}]);
      const unused = fake.images.filter((i) => !i.inUse);
      const r = await client.gcImages({ unusedForMs: 86_400_000 });
      assert.deepEqual(fake.lastCall("gcImages"), [{ unusedForMs: 86_400_000 }]);
      assert.deepEqual(
        r.removedImages,
        unused.map((i) => i.digest),
      );
      assert.equal(
        r.freedBytes,
        unused.reduce((n, i) => n + i.sizeBytes, 0),
      );
      assert.deepEqual(fake.images, [sampleImage]);
      await client.gcImages({ unusedForMs: 0 });
      assert.deepEqual(fake.lastCall("gcImages"), [{ unusedForMs: 0 }]);
      await assert.rejects(client.gcImages({ unusedForMs: -1 }), isBerth("invalid_request", /unusedForMs/));
    });

    test("StreamLogs: tail, then follow until the container's log ends", async () => {
      const { client, fake } = h;
      await client.runContainer({ id: "ctr-logs", args: [], cpu: 1, memoryBytes: 1024 });
      for (let i = 1; i <= 5; i++) fake.appendLog("ctr-logs", i % 2 ? "stdout" : "stderr", `line ${i} ✓`);
      const tail = await collect(client.streamLogs("ctr-logs", { tail: 2 }));
      assert.deepEqual(tail, fake.logs.get("ctr-logs")!.slice(3));
      assert.deepEqual(fake.lastCall("streamLogs"), ["ctr-logs", { follow: false, tail: 2 }]);
      assert.equal((await collect(client.streamLogs("ctr-logs"))).length, 5);
      assert.deepEqual(fake.lastCall("streamLogs"), ["ctr-logs", { follow: false, tail: undefined }]);

      const seen: LogEntry[] = [];
      const following = (async () => {
        for await (const e of client.streamLogs("ctr-logs", { follow: true, tail: 1 })) seen.push(e);
      })();
      await waitFor(() => seen.length === 1, { what: "the tailed line", timeoutMs: 10_000 });
      fake.appendLog("ctr-logs", "stderr", "later");
      await waitFor(() => seen.length === 2, { what: "the followed line", timeoutMs: 10_000 });
      fake.endLogs("ctr-logs");
      await following;
      assert.deepEqual(
        seen.map((e) => [e.stream, e.line]),
        [
          ["stdout", "line 5 ✓"],
          ["stderr", "later"],
        ],
      );
    });

    test("StreamLogs: aborting on the client aborts the agent's signal", async () => {
      const { client, fake } = h;
      await client.runContainer({ id: "ctr-abort", args: [], cpu: 1, memoryBytes: 1024 });
      fake.appendLog("ctr-abort", "stdout", "first");
      const abort = new AbortController();
      const seen: string[] = [];
      const following = (async () => {
        for await (const e of client.streamLogs("ctr-abort", { follow: true, signal: abort.signal }))
          seen.push(e.line);
      })();
      await waitFor(() => seen.length === 1, { what: "the first line", timeoutMs: 10_000 });
      const serverSignal = fake.lastLogSignal!;
      assert.equal(serverSignal.aborted, false);
      abort.abort();
      await following; // ends quietly, no error
      await waitFor(() => serverSignal.aborted, { what: "the agent-side abort", timeoutMs: 10_000 });

      // Leaving the loop early cancels too.
      for await (const _ of client.streamLogs("ctr-abort", { follow: true })) break;
      const second = fake.lastLogSignal!;
      assert.notEqual(second, serverSignal);
      await waitFor(() => second.aborted, { what: "the agent-side abort after break", timeoutMs: 10_000 });
    });

    test("StreamLogs of an unknown container throws not_found from the iterator", async () => {
      await assert.rejects(collect(h.client.streamLogs("ctr-nope")), isBerth("not_found", /ctr-nope/));
    });

    test("Exec: stdin reaches the process, output comes back, exit code last", async () => {
      const { client, fake } = h;
      await client.runContainer({ id: "ctr-exec", args: [], cpu: 1, memoryBytes: 1024 });
      const req = { args: ["upper"], env: { TERM: "xterm" }, cwd: "/tmp", user: "1000", tty: false };
      const s = await client.exec("ctr-exec", req);
      assert.deepEqual(fake.lastCall("exec"), ["ctr-exec", req]);
      const out: ExecOutput[] = [];
      const reading = (async () => {
        for await (const c of s.output) out.push(c);
      })();
      s.writeStdin(Buffer.from("hello "));
      s.writeStdin(Buffer.from("world"));
      await waitFor(() => joined(out, "stdout").length === 11, { what: "echoed output", timeoutMs: 10_000 });
      s.resize(120, 40);
      s.closeStdin();
      assert.equal(await s.exit, 0);
      await reading;
      assert.equal(joined(out, "stdout").toString(), "HELLO WORLD");
      const session = fake.execs.at(-1)!;
      assert.equal(session.stdinClosed, true);
      assert.deepEqual(session.resized, [120, 40]);
      assert.throws(() => s.writeStdin(Buffer.from("x")), isBerth("failed_precondition"));
    });

    test("Exec: stderr chunks and a non-zero exit code; absent fields stay absent", async () => {
      const { client, fake } = h;
      const s = await client.exec("ctr-exec", { args: ["exit", "3", "partial"] });
      assert.deepEqual(fake.lastCall("exec"), ["ctr-exec", { args: ["exit", "3", "partial"] }]);
      const out = await collect(s.output);
      assert.equal(await s.exit, 3);
      assert.equal(joined(out, "stdout").toString(), "partial");
      assert.equal(joined(out, "stderr").toString(), "bye\n");
    });

    test("Exec: binary data crosses intact in both directions", async () => {
      const { client } = h;
      const bytes = Buffer.alloc(256 * 1024);
      for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 7 + (i >> 8)) & 0xff;
      const s = await client.exec("ctr-exec", { args: ["cat"] });
      const reading = collect(s.output);
      for (let o = 0; o < bytes.length; o += 10_000) s.writeStdin(bytes.subarray(o, o + 10_000));
      s.closeStdin();
      assert.equal(await s.exit, 0);
      assert.ok(joined(await reading, "stdout").equals(bytes));
    });

    test("Exec: kill sends the signal; cancelling the call kills the process", async () => {
      const { client, fake } = h;
      const s = await client.exec("ctr-exec", { args: ["sleep"] });
      s.kill("SIGTERM");
      assert.equal(await s.exit, 143);
      assert.equal(fake.execs.at(-1)!.killedWith, "SIGTERM");

      const c = await client.exec("ctr-exec", { args: ["sleep"] });
      const victim = fake.execs.at(-1)!;
      c.cancel();
      await assert.rejects(c.exit, isBerth("unavailable", /cancelled/));
      await waitFor(() => victim.killedWith === "default", {
        what: "the agent-side kill",
        timeoutMs: 10_000,
      });
    });

    test("Exec: a client that half-closes the stream closes the process's stdin", async () => {
      const { client, fake } = h;
      const raw = (
        client as unknown as {
          client: Record<
            string,
            (
              ...a: unknown[]
            ) => grpc.ClientDuplexStream<object, { output: string; stdout?: Buffer; exitCode?: number }>
          >;
        }
      ).client;
      const call = raw.Exec!.call((client as unknown as { client: unknown }).client, new grpc.Metadata(), {});
      const got: string[] = [];
      const done = new Promise<void>((resolve, reject) => {
        call.on("data", (m) =>
          got.push(
            m.output === "stdout"
              ? `stdout:${m.stdout}`
              : m.output === "exitCode"
                ? `exit:${m.exitCode}`
                : m.output,
          ),
        );
        call.on("end", resolve);
        call.on("error", reject);
      });
      call.write({ start: { containerId: "ctr-exec", request: { args: ["upper"] } } });
      call.write({ stdin: Buffer.from("abc") });
      call.end();
      await done;
      assert.deepEqual(got, ["started", "stdout:ABC", "exit:0"]);
      assert.equal(fake.execs.at(-1)!.stdinClosed, true);
    });

    test("Exec in an unknown container fails the exec call itself", async () => {
      await assert.rejects(h.client.exec("ctr-nope", { args: ["true"] }), isBerth("not_found", /ctr-nope/));
    });

    test("BerthErrors cross the wire with code, message and details", async () => {
      const { client, fake } = h;
      const e = await client.getContainer("ctr-missing").catch((err: unknown) => err);
      assert.ok(e instanceof BerthError);
      assert.equal(e.code, "not_found");
      assert.equal(e.message, "container ctr-missing not found");
      assert.deepEqual(e.details, { containerId: "ctr-missing" });

      fake.failWith = new BerthError("resource_exhausted", "not enough memory: 64 GiB asked, 8 GiB free", {
        askedBytes: 64 * 1024 ** 3,
        freeBytes: 8 * 1024 ** 3,
        nested: { gpus: ["H100"] },
      });
      try {
        const r = await client
          .runContainer({ args: [], cpu: 1, memoryBytes: 64 * 1024 ** 3 })
          .catch((x: unknown) => x);
        assert.ok(r instanceof BerthError);
        assert.equal(r.code, "resource_exhausted");
        assert.equal(r.kind, "ResourceExhausted");
        assert.equal(r.message, "not enough memory: 64 GiB asked, 8 GiB free");
        assert.deepEqual(r.details, (fake.failWith as BerthError).details);
        await assert.rejects(client.exec("ctr-exec", { args: ["sleep"] }), isBerth("resource_exhausted"));
        await assert.rejects(collect(client.streamLogs("ctr-logs")), isBerth("resource_exhausted"));
      } finally {
        fake.failWith = undefined;
      }
    });
  });
}

containerSuite("the unix socket", async (fake) => {
  const dir = mkdtempSync(join(tmpdir(), "berth-ctr-rpc-"));
  const cleanup = () => rmSync(dir, { recursive: true, force: true });
  const path = join(dir, "agent.sock");
  const server = await startAgentRpcServer({
    impl: new FakeAgent(),
    containers: fake,
    unixSocket: path,
  }).catch((e: unknown) => {
    cleanup();
    throw e;
  });
  return { server, cleanup, client: new AgentRpcClient({ address: `unix://${path}` }) };
});

containerSuite("TCP with mutual TLS", async (fake) => {
  const pki = await ClusterPki.load(memoryStore());
  const agentCert = await pki.issueAgentCert("agent-ctr1", { ipAddresses: ["127.0.0.1"] });
  const clientCert = await pki.issueCoordinatorClientCert();
  const server = await startAgentRpcServer({
    impl: new FakeAgent(),
    containers: fake,
    tcp: { host: "127.0.0.1", port: 0, tls: { caPem: pki.caPem, ...agentCert } },
  });
  const client = new AgentRpcClient({
    address: `127.0.0.1:${server.tcpPort}`,
    tls: { caPem: pki.caPem, ...clientCert },
  });
  return { server, client };
});

test("an agent without a container host answers the container RPCs with not_implemented", async (t) => {
  const path = join(tempDir(t), "agent.sock");
  const server = await startAgentRpcServer({ impl: new FakeAgent(), unixSocket: path });
  t.after(() => server.close());
  const client = new AgentRpcClient({ address: `unix://${path}` });
  t.after(() => client.close());
  const unimplemented = isBerth("not_implemented", /does not serve the container API/);
  assert.equal((await client.health()).status, "SERVING");
  await assert.rejects(client.getContainer("ctr-1"), unimplemented);
  await assert.rejects(client.runContainer({ args: [], cpu: 1, memoryBytes: 1 }), unimplemented);
  await assert.rejects(client.listImages(), unimplemented);
  await assert.rejects(client.importImage({ path: "/a.tar", name: "a" }), unimplemented);
  await assert.rejects(client.gcImages(), unimplemented);
  await assert.rejects(client.exposePort("ctr-1", 8000), unimplemented);
  await assert.rejects(collect(client.streamLogs("ctr-1", { follow: true })), unimplemented);
  await assert.rejects(client.exec("ctr-1", { args: ["sh"] }), unimplemented);
});
