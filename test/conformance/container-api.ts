// One conformance suite for the agent's contract (api/: ContainerApi,
// ContainerFilesApi, ContainerSnapshotApi, SandboxProcessApi), written against the interfaces
// only. It runs against the real host (host.test.ts), the gRPC client over
// the agent's server (grpc.test.ts) and the shared fake (fake.test.ts): what
// it checks, all three do.
//
// It makes four containers (two sleeping, two that run a short script and
// exit), reuses the subject's one image, and removes every container it made
// when it ends, pass or fail. Scripts use only `sh -c` with echo, sleep and
// exit, plus `cat`: what a Debian image and the fake's scripted mode share.

import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type TestContext, test } from "node:test";
import type {
  ContainerApi,
  ContainerFilesApi,
  ContainerSnapshotApi,
  ContainerStatus,
  ExecSession,
  LogEntry,
  RunContainerRequest,
  SandboxProcessApi,
} from "../../api/index.ts";
import { tempDir } from "../helpers/env.ts";
import { waitUntil } from "../helpers/wait.ts";

export type ConformanceApi = ContainerApi & ContainerFilesApi & ContainerSnapshotApi & SandboxProcessApi;

export interface ConformanceSubject {
  api: ConformanceApi;
  /** An image reference the subject can run and pull (sh, echo, sleep, cat, /tmp). */
  image: string;
}

const MiB = 1024 * 1024;
const SLEEP = ["sh", "-c", "sleep 600"];

/** Asserts a rejection with this berth error code (and, when given, a message naming `names`). */
const rejectsWith = (code: string, names?: string) => (e: unknown) => {
  const err = e as { code?: string; message?: string };
  assert.equal(err.code, code, `expected ${code}, got ${err.code}: ${err.message}`);
  if (names !== undefined) assert.ok(err.message?.includes(names), `message names ${names}: ${err.message}`);
  return true;
};

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

async function text(it: AsyncIterable<Uint8Array>): Promise<string> {
  const parts: Uint8Array[] = [];
  for await (const c of it) parts.push(c);
  return Buffer.concat(parts).toString("utf8");
}

async function* bytes(s: string): AsyncGenerator<Uint8Array> {
  yield Buffer.from(s);
}

/** Bounds a promise: fails naming `what` after `ms`. */
async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** Runs an exec to its end: stdout, stderr, exit code. */
async function execAll(
  s: ExecSession,
  stdin?: string,
): Promise<{ stdout: string; stderr: string; code: number }> {
  if (stdin !== undefined) s.writeStdin(Buffer.from(stdin));
  s.closeStdin();
  const out = { stdout: "", stderr: "" };
  const reading = (async () => {
    for await (const c of s.output) out[c.stream] += Buffer.from(c.data).toString("utf8");
  })();
  const code = await within(s.exit, 30_000, "the exec's exit");
  await within(reading, 10_000, "the exec's output");
  return { ...out, code };
}

const lines = (entries: LogEntry[], stream: "stdout" | "stderr") =>
  entries.filter((e) => e.stream === stream).map((e) => e.line);

/**
 * Registers one test, `name`, whose subtests are the contract's cases.
 * `setup` gives the subject, or undefined when this machine cannot (it has
 * skipped the test, or under CI failed it); what it registers with t.after
 * runs after the suite's own cleanup.
 */
export function containerApiConformance(
  name: string,
  setup: (t: TestContext) => Promise<ConformanceSubject | undefined>,
  opts: { timeoutMs?: number } = {},
): void {
  test(name, { timeout: opts.timeoutMs ?? 300_000 }, async (t) => {
    const subject = await setup(t);
    if (!subject) return;
    const { api, image } = subject;
    // Ids and labels of this run only: a shared host may hold others' containers.
    const tag = `cf${process.pid.toString(36)}${Date.now().toString(36).slice(-5)}`;
    const made = new Set<string>();
    const idOf = (role: string) => `${tag}-${role}`;
    const labelsOf = (role: string) => ({ "berth.conformance": tag, role });
    const run = async (role: string, args: string[], over: Partial<RunContainerRequest> = {}) => {
      const id = idOf(role);
      made.add(id);
      return api.runContainer({
        id,
        image,
        args,
        cpu: 0.25,
        memoryBytes: 256 * MiB,
        labels: labelsOf(role),
        ...over,
      });
    };
    const stoppedOf = (id: string, timeoutMs = 30_000) =>
      waitUntil(
        async () => {
          const s = await api.getContainer(id);
          return s.state === "stopped" ? s : undefined;
        },
        { what: `container ${id} to stop`, timeoutMs, intervalMs: 50 },
      );

    try {
      let a: ContainerStatus | undefined;

      await t.test(
        "run: a running container with the request's id, labels and limits; get and list agree",
        async () => {
          a = await run("a", SLEEP);
          assert.equal(a.id, idOf("a"));
          assert.equal(a.state, "running");
          assert.deepEqual(a.labels, labelsOf("a"));
          assert.equal(a.cpu, 0.25);
          assert.equal(a.memoryBytes, 256 * MiB);
          assert.deepEqual(a.gpus, []);
          assert.ok(a.createdAt > 0 && a.imageDigest.length > 0, "createdAt and imageDigest are set");
          const got = await api.getContainer(a.id);
          assert.equal(got.id, a.id);
          assert.equal(got.state, "running");
          assert.deepEqual(got.labels, a.labels);
          assert.equal(got.createdAt, a.createdAt);
          const listed = (await api.listContainers()).find((s) => s.id === a!.id);
          assert.equal(listed?.state, "running", "listContainers() shows it");
        },
      );
      const idA = idOf("a");

      await t.test("a generated id when none is given: ctr-…", async () => {
        // A request without id, answered by the id it got; removed at once.
        const s = await api.runContainer({
          image,
          args: SLEEP,
          cpu: 0.25,
          memoryBytes: 64 * MiB,
          labels: labelsOf("anon"),
        });
        made.add(s.id);
        assert.match(s.id, /^ctr-[A-Za-z0-9_.-]+$/);
        await api.stopContainer(s.id, { graceMs: 0, remove: true });
        made.delete(s.id);
      });

      await t.test("a duplicate id is a conflict, and the first container is untouched", async () => {
        await assert.rejects(run("a", SLEEP), rejectsWith("conflict", idA));
        assert.equal((await api.getContainer(idA)).state, "running");
      });

      await t.test("labels filter: every label must match", async () => {
        await run("b", SLEEP);
        const onlyA = await api.listContainers({ labels: labelsOf("a") });
        assert.deepEqual(
          onlyA.map((s) => s.id),
          [idA],
        );
        const ours = await api.listContainers({ labels: { "berth.conformance": tag } });
        assert.deepEqual(ours.map((s) => s.id).sort(), [idA, idOf("b")].sort());
        assert.deepEqual(await api.listContainers({ labels: { "berth.conformance": `${tag}-none` } }), []);
      });

      await t.test("exec: stdout and stderr apart, the exit code, stdin", async () => {
        const r = await execAll(
          await api.exec(idA, { args: ["sh", "-c", "echo out; echo err >&2; exit 7"] }),
        );
        assert.deepEqual(r, { stdout: "out\n", stderr: "err\n", code: 7 });
        const ok = await execAll(await api.exec(idA, { args: ["sh", "-c", "echo fine"] }));
        assert.deepEqual(ok, { stdout: "fine\n", stderr: "", code: 0 });
        const cat = await execAll(await api.exec(idA, { args: ["cat"] }), "hello\nstdin\n");
        assert.deepEqual(cat, { stdout: "hello\nstdin\n", stderr: "", code: 0 });
      });

      await t.test("exec: kill ends it with 128+signo", async () => {
        const s = await api.exec(idA, { args: ["sh", "-c", "sleep 60"] });
        const reading = collect(s.output);
        s.kill("SIGKILL");
        assert.equal(await within(s.exit, 15_000, "the killed exec's exit"), 137);
        await within(reading, 10_000, "the killed exec's output");
      });

      await t.test(
        "processes: pids in order, output by stream and offset, follow, stdin, kill, wait with a timeout",
        async () => {
          const p1 = await api.startProcess(idA, { args: ["sh", "-c", "echo out; echo err >&2; exit 7"] });
          assert.deepEqual([p1.pid, p1.status, p1.exitCode, p1.cwd], [1, "running", -1, null]);
          const e1 = await within(api.waitProcess(idA, 1), 30_000, "process 1's end");
          assert.deepEqual([e1.status, e1.exitCode], ["exited", 7]);
          assert.ok(e1.endedAt !== undefined && e1.endedAt >= e1.startedAt);
          const out = await api.readProcessOutput(idA, 1, "stdout", 0);
          assert.deepEqual([out.start, out.offset, Buffer.from(out.data).toString()], [0, 0, "out\n"]);
          assert.equal(
            Buffer.from((await api.readProcessOutput(idA, 1, "stderr", 0)).data).toString(),
            "err\n",
          );
          const both = Buffer.from((await api.readProcessOutput(idA, 1, "combined", 0)).data).toString();
          assert.deepEqual(both.split("\n").sort(), ["", "err", "out"]);
          const from2 = await api.readProcessOutput(idA, 1, "stdout", 2);
          assert.deepEqual([from2.offset, Buffer.from(from2.data).toString()], [2, "t\n"]);

          // Followed live: what comes later arrives, from any offset, and the stream ends with the process.
          await api.startProcess(idA, { args: ["sh", "-c", "echo one; sleep 1; echo two"] });
          const [all, tail] = await within(
            Promise.all([
              text(api.followProcessOutput(idA, 2, "combined", 0)),
              text(api.followProcessOutput(idA, 2, "stdout", 4)),
            ]),
            30_000,
            "following process 2",
          );
          assert.deepEqual([all, tail], ["one\ntwo\n", "two\n"]);

          await api.startProcess(idA, { args: ["cat"] });
          await api.writeProcessStdin(idA, 3, Buffer.from("hello\n"));
          await api.writeProcessStdin(idA, 3, Buffer.from("stdin\n"), { eof: true });
          const e3 = await within(api.waitProcess(idA, 3), 30_000, "cat's end");
          assert.deepEqual([e3.status, e3.exitCode], ["exited", 0]);
          assert.equal(
            Buffer.from((await api.readProcessOutput(idA, 3, "stdout", 0)).data).toString(),
            "hello\nstdin\n",
          );
          await assert.rejects(
            api.writeProcessStdin(idA, 3, Buffer.from("late")),
            rejectsWith("failed_precondition"),
          );

          // sleep itself, not under sh: a kill of sh alone would leave sleep holding the output open.
          await api.startProcess(idA, { args: ["sleep", "60"], cwd: "/tmp" });
          const still = await api.waitProcess(idA, 4, { timeoutMs: 50 });
          assert.deepEqual([still.status, still.exitCode, still.cwd], ["running", -1, "/tmp"]);
          await api.killProcess(idA, 4);
          const e4 = await within(api.waitProcess(idA, 4), 15_000, "the killed process's end");
          assert.deepEqual([e4.status, e4.exitCode], ["killed", 137]);
          await api.killProcess(idA, 4); // an ended process is left as it is

          assert.deepEqual(
            (await api.listProcesses(idA)).map((p) => [p.pid, p.status]),
            [
              [1, "exited"],
              [2, "exited"],
              [3, "exited"],
              [4, "killed"],
            ],
          );
          assert.deepEqual((await api.getProcess(idA, 2)).args, ["sh", "-c", "echo one; sleep 1; echo two"]);
          await assert.rejects(api.getProcess(idA, 99), rejectsWith("process_not_found", "99"));
          await assert.rejects(api.startProcess(idA, { args: [] }), rejectsWith("invalid_request"));
        },
      );

      await t.test("processes: one run streams the start, the output by stream and the end", async () => {
        const run = api.runProcess?.bind(api);
        assert.ok(run, "the subject runs a process in one call");
        const events = await within(
          collect(run(idA, { args: ["sh", "-c", "echo out; echo err >&2; exit 5"] })),
          30_000,
          "the run's events",
        );
        const first = events[0];
        const last = events[events.length - 1];
        assert.ok(first?.type === "started", `the first event is ${first?.type}`);
        assert.deepEqual([first.process.status, first.process.exitCode], ["running", -1]);
        const out = (stream: string) =>
          Buffer.concat(
            events.flatMap((e) => (e.type === "output" && e.stream === stream ? [Buffer.from(e.data)] : [])),
          ).toString();
        assert.deepEqual([out("stdout"), out("stderr")], ["out\n", "err\n"]);
        assert.ok(last?.type === "ended", `the last event is ${last?.type}`);
        assert.deepEqual(
          [last.process.pid, last.process.status, last.process.exitCode],
          [first.process.pid, "exited", 5],
        );
        // The run's process is the container's like any other.
        assert.equal((await api.getProcess(idA, first.process.pid)).exitCode, 5);
        await assert.rejects(collect(run(idA, { args: [] })), rejectsWith("invalid_request"));
        await assert.rejects(
          collect(run("no-such-container", { args: ["true"] })),
          rejectsWith("not_found", "no-such-container"),
        );
      });

      await t.test("files: directories, write, stat, list, read, find, replace, delete", async () => {
        const dir = await api.createDirectory(idA, `/tmp/${tag}/sub`);
        assert.equal(dir.isDir, true);
        assert.equal(dir.path, `/tmp/${tag}/sub`);
        const body = "hello world\nsecond line\n";
        const w = await api.writeFile(idA, `tmp/${tag}/a.txt`, bytes(body), { mode: 0o600 });
        assert.equal(w.path, `/tmp/${tag}/a.txt`);
        assert.equal(w.name, "a.txt");
        assert.equal(w.size, Buffer.byteLength(body));
        assert.equal(w.permissions, "-rw-------");
        assert.equal(w.isDir, false);
        const st = await api.statPath(idA, `/tmp/${tag}/a.txt`);
        assert.equal(st.size, w.size);
        assert.equal(st.mode, 0o600);
        assert.deepEqual(
          (await api.listDir(idA, `/tmp/${tag}`)).map((e) => [e.name, e.isDir]),
          [
            ["a.txt", false],
            ["sub", true],
          ],
        );
        assert.equal(await text(api.readFile(idA, `/tmp/${tag}/a.txt`)), body);
        const found = await api.findInFiles(idA, `/tmp/${tag}`, "wor.d");
        assert.deepEqual(found, [
          {
            path: `/tmp/${tag}/a.txt`,
            line: "hello world",
            range: { start: { line: 1, column: 7 }, end: { line: 1, column: 12 } },
          },
        ]);
        assert.deepEqual(await api.replaceInFiles(idA, `/tmp/${tag}`, "second", "2nd"), [
          { path: `/tmp/${tag}/a.txt`, replacements: 1 },
        ]);
        assert.equal(await text(api.readFile(idA, `/tmp/${tag}/a.txt`)), "hello world\n2nd line\n");
        await api.deleteFile(idA, `/tmp/${tag}/a.txt`);
        await assert.rejects(
          api.statPath(idA, `/tmp/${tag}/a.txt`),
          rejectsWith("path_not_found", `/tmp/${tag}/a.txt`),
        );
        await assert.rejects(api.deleteFile(idA, `/tmp/${tag}/sub`), rejectsWith("path_invalid"));
        await api.deleteDirectory(idA, `/tmp/${tag}`);
        await assert.rejects(api.listDir(idA, `/tmp/${tag}`), rejectsWith("path_not_found"));
        await assert.rejects(api.deleteDirectory(idA, "/"), rejectsWith("path_invalid"));
      });

      await t.test(
        "snapshots: checkpointSupport answers; commitFilesystem makes an image known by its ref",
        async () => {
          const support = await api.checkpointSupport();
          assert.equal(typeof support.supported, "boolean");
          if (!support.supported) assert.ok(support.reason, "an unsupported host says why");
          await api.writeFile(idA, "/committed.txt", bytes("kept\n"));
          const ref = `localhost/conformance-${tag}:commit`;
          const img = await api.commitFilesystem(idA, ref);
          assert.ok(img.refs.includes(ref), `refs ${img.refs} include ${ref}`);
          assert.ok(img.digest.startsWith("sha256:"));
          assert.ok(
            (await api.listImages()).some((i) => i.refs.includes(ref)),
            "listImages shows the commit",
          );
          await api.removeImage(ref);
          assert.ok(!(await api.listImages()).some((i) => i.refs.includes(ref)), "removed");
        },
      );

      await t.test(
        "images: the image in use is listed; pull answers the same image; import, list, remove",
        async (t) => {
          const listed = (await api.listImages()).find((i) => i.refs.includes(image));
          assert.ok(listed, `listImages shows ${image}`);
          assert.equal(listed.inUse, true, "a running container's image is in use");
          const pulled = await api.pullImage(image);
          assert.equal(pulled.digest, listed.digest);
          assert.ok(pulled.refs.includes(image));
          await assert.rejects(
            api.removeImage(`localhost/conformance-${tag}:absent`),
            rejectsWith("not_found"),
          );

          // A rootfs directory on the subject's host (the same machine for all three).
          const root = join(tempDir(t, "berth-conformance-rootfs-"), "rootfs");
          mkdirSync(join(root, "etc"), { recursive: true });
          writeFileSync(join(root, "etc", "hello.txt"), "hi\n");
          const name = `localhost/conformance-${tag}:imported`;
          const imported = await api.importImage({ path: root, name, kind: "rootfs" });
          assert.ok(imported.refs.includes(name), `refs ${imported.refs} include ${name}`);
          assert.equal(imported.inUse, false);
          assert.ok((await api.listImages()).some((i) => i.refs.includes(name)));
          await api.removeImage(name);
          assert.ok(!(await api.listImages()).some((i) => i.refs.includes(name)));
        },
      );

      await t.test(
        "a container that exits: stopped, its exit code, reason exited; its logs by stream, tail",
        async () => {
          const script = "echo err >&2; sleep 0.3; echo one; echo two; echo three; exit 3";
          const c = await run("exits", ["sh", "-c", script]);
          const s = await stoppedOf(c.id);
          assert.equal(s.exitCode, 3);
          assert.equal(s.reason, "exited");
          assert.ok(s.exitedAt !== undefined && s.exitedAt >= s.createdAt, "exitedAt is set");
          const all = await collect(api.streamLogs(c.id));
          assert.deepEqual(lines(all, "stdout"), ["one", "two", "three"]);
          assert.deepEqual(lines(all, "stderr"), ["err"]);
          assert.ok(all.every((e) => e.containerId === c.id && e.ts > 0));
          // tail is per stream: the spools keep stdout and stderr apart (docs/agent-host.md).
          const tail = await collect(api.streamLogs(c.id, { tail: 2 }));
          assert.deepEqual(lines(tail, "stdout"), ["two", "three"]);
          assert.deepEqual(lines(tail, "stderr"), ["err"]);
          assert.deepEqual(await collect(api.streamLogs(c.id, { tail: 0 })), []);
          // Following a container that has ended gives its lines and ends.
          const followed = await within(
            collect(api.streamLogs(c.id, { follow: true })),
            10_000,
            "follow of an ended container",
          );
          assert.deepEqual(lines(followed, "stdout"), ["one", "two", "three"]);
          await assert.rejects(
            api.exec(c.id, { args: ["sh", "-c", "echo no"] }),
            rejectsWith("failed_precondition"),
          );
        },
      );

      await t.test(
        "follow: lines written later arrive, and the stream ends when the container does",
        async () => {
          const c = await run("follows", ["sh", "-c", "echo first; sleep 1; echo second; exit 0"]);
          const got = await within(
            collect(api.streamLogs(c.id, { follow: true })),
            30_000,
            "follow to the container's end",
          );
          assert.deepEqual(lines(got, "stdout"), ["first", "second"]);
          const s = await stoppedOf(c.id);
          assert.equal(s.exitCode, 0);
          assert.equal(s.reason, "exited");
        },
      );

      await t.test("follow: an abort signal ends the stream of a running container", async () => {
        const ac = new AbortController();
        const following = collect(api.streamLogs(idA, { follow: true, signal: ac.signal }));
        setTimeout(() => ac.abort(), 300);
        await within(
          following.catch((e: unknown) => {
            if ((e as Error).name !== "AbortError") throw e;
            return [];
          }),
          10_000,
          "an aborted follow",
        );
      });

      await t.test("an unknown id is not_found, for every call that names a container", async () => {
        const ghost = idOf("ghost");
        await assert.rejects(api.getContainer(ghost), rejectsWith("not_found", ghost));
        await assert.rejects(api.stopContainer(ghost, { graceMs: 0 }), rejectsWith("not_found", ghost));
        await assert.rejects(
          api.exec(ghost, { args: ["sh", "-c", "true"] }),
          rejectsWith("not_found", ghost),
        );
        await assert.rejects(collect(api.streamLogs(ghost)), rejectsWith("not_found", ghost));
        await assert.rejects(api.statPath(ghost, "/"), rejectsWith("not_found", ghost));
        await assert.rejects(api.listProcesses(ghost), rejectsWith("not_found", ghost));
        await assert.rejects(api.getProcess(ghost, 1), rejectsWith("not_found", ghost));
        await assert.rejects(
          api.startProcess(ghost, { args: ["sh", "-c", "true"] }),
          rejectsWith("not_found", ghost),
        );
        await assert.rejects(
          api.commitFilesystem(ghost, `localhost/conformance-${tag}:ghost`),
          rejectsWith("not_found"),
        );
        assert.ok(!(await api.listContainers()).some((s) => s.id === ghost));
      });

      await t.test("stop: stopped and killed, still listed; with remove, gone (not_found)", async () => {
        const b = idOf("b");
        const s = await api.stopContainer(b, { graceMs: 0 });
        assert.equal(s.state, "stopped");
        assert.equal(s.reason, "killed");
        assert.equal(s.exitCode, 137, "SIGKILL at once with no grace");
        assert.equal((await api.getContainer(b)).state, "stopped");
        assert.ok(
          (await api.listContainers({ labels: labelsOf("b") })).some((x) => x.id === b),
          "listed until removed",
        );
        await assert.rejects(api.exec(b, { args: ["sh", "-c", "true"] }), rejectsWith("failed_precondition"));
        const again = await api.stopContainer(b, { graceMs: 0, remove: true });
        assert.equal(again.state, "stopped");
        made.delete(b);
        await assert.rejects(api.getContainer(b), rejectsWith("not_found"));
        assert.deepEqual(await api.listContainers({ labels: labelsOf("b") }), []);
      });
    } finally {
      for (const id of made) {
        await api.stopContainer(id, { graceMs: 0, remove: true }).catch((e: unknown) => {
          if ((e as { code?: string }).code !== "not_found") throw e;
        });
      }
    }
  });
}
