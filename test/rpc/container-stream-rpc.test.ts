// The streaming container RPCs (StreamLogs, Exec) end to end over both
// transports against an in-memory ContainerApi: bytes, ends, cancellation and
// errors arrive on the other side as they were sent.

import assert from "node:assert/strict";
import { test } from "node:test";
import * as grpc from "@grpc/grpc-js";
import type { ExecOutput, LogEntry } from "../../api/index.ts";
import { waitFor } from "../../shared/net.ts";
import { collect, containerSuites, isBerth } from "./container-rpc-suite.ts";

function joined(chunks: ExecOutput[], stream: "stdout" | "stderr"): Buffer {
  return Buffer.concat(chunks.filter((c) => c.stream === stream).map((c) => c.data));
}

containerSuites("streaming container RPCs", (h) => {
  test("StreamLogs: tail, then follow until the container's log ends", async () => {
    const { client, fake } = h;
    await client.runContainer({ id: "ctr-logs", args: [], cpu: 1, memoryBytes: 1024 });
    for (let i = 1; i <= 5; i++) fake.appendLog("ctr-logs", i % 2 ? "stdout" : "stderr", `line ${i} ✓`);
    const tail = await collect(client.streamLogs("ctr-logs", { tail: 2 }));
    // The last two of each stream, stdout's first (as an agent's spools give them).
    const all = fake.logs.get("ctr-logs")!;
    const last2 = (stream: string) => all.filter((e) => e.stream === stream).slice(-2);
    assert.deepEqual(tail, [...last2("stdout"), ...last2("stderr")]);
    assert.deepEqual(fake.lastCall("streamLogs"), ["ctr-logs", { follow: false, tail: 2 }]);
    assert.equal((await collect(client.streamLogs("ctr-logs"))).length, 5);
    assert.deepEqual(fake.lastCall("streamLogs"), ["ctr-logs", { follow: false, tail: undefined }]);

    const seen: LogEntry[] = [];
    const following = (async () => {
      for await (const e of client.streamLogs("ctr-logs", { follow: true, tail: 1 })) seen.push(e);
    })();
    await waitFor(() => seen.length === 2, { what: "the tailed lines", timeoutMs: 10_000 });
    fake.appendLog("ctr-logs", "stderr", "later");
    await waitFor(() => seen.length === 3, { what: "the followed line", timeoutMs: 10_000 });
    fake.endLogs("ctr-logs");
    await following;
    assert.deepEqual(
      seen.map((e) => [e.stream, e.line]),
      [
        ["stdout", "line 5 ✓"],
        ["stderr", "line 4 ✓"],
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
});
