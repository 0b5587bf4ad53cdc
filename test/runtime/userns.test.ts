// Containers in a user namespace (agent/runtime/idmap.ts, docs/runtime.md
// "User namespaces"): root inside is an unprivileged host range that no other
// container holds; the image (shared, owned by root on disk) still reads as
// root's inside, what the container writes lands in its own range, a volume
// (an idmapped bind) is written as the host's root would, and a root-owned
// host file bind-mounted read-write without the mapping cannot be written.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";
import {
  FIRST_HOST_ID,
  ID_MAP_SIZE,
  idInside,
  pickIdMap,
  sharedRootfsPath,
} from "../../agent/runtime/idmap.ts";
import { mountsUnder } from "../../agent/runtime/rootfs.ts";
import { waitFor } from "../../shared/net.ts";
import { needs } from "../helpers/env.ts";
import { py, runtimeHarness } from "./harness.ts";

const REQ = { root: true, commands: ["runc", "mount", "umount", "python3"] };
const ip = (...args: string[]) => promisify(execFile)("ip", args);

test("id ranges: the lowest free one, none shared, all below 2^31", () => {
  const a = pickIdMap([]);
  assert.deepEqual(a, { hostId: FIRST_HOST_ID, size: ID_MAP_SIZE });
  const b = pickIdMap([a]);
  assert.equal(b.hostId, FIRST_HOST_ID + ID_MAP_SIZE);
  assert.deepEqual(pickIdMap([b]), a);
  assert.equal(idInside(b, b.hostId + 1000), 1000);
  assert.equal(idInside(b, a.hostId), undefined);
  assert.ok(b.hostId + b.size < 2 ** 31);
});

test("root inside is an unprivileged host range; the image reads as root's; writes land in the range", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const scratch = mkdtempSync(join(tmpdir(), "berth-userns-"));
  t.after(() => rmSync(scratch, { recursive: true, force: true }));
  // A host file owned by root, mode 0644, bind-mounted read-write without the mapping.
  const hostFile = join(scratch, "host-owned");
  writeFileSync(hostFile, "host\n");
  chmodSync(hostFile, 0o644);
  const volume = join(scratch, "volume");
  mkdirSync(volume);
  writeFileSync(join(volume, "before"), "from the host\n");
  const script = [
    "import os",
    "print('map', open('/proc/self/uid_map').read().split())",
    "print('gmap', open('/proc/self/gid_map').read().split())",
    "print('uid', os.getuid(), 'passwd', os.stat('/etc/passwd').st_uid)",
    "open('/etc/written-inside', 'w').write('x')",
    "try:",
    "    open('/hostfile', 'a').write('root inside')",
    "    print('host file: written')",
    "except OSError as e:",
    "    print('host file:', e.errno)",
    "print('volume file owner', os.stat('/vol/before').st_uid)",
    "open('/vol/before', 'a').write('and from inside\\n')",
    "open('/vol/made-inside', 'w').write('new\\n')",
    "print('done')",
  ].join("\n");
  const spec = h.spec(py(script), {
    userNamespace: true,
    mounts: [
      { source: hostFile, destination: "/hostfile" },
      { source: volume, destination: "/vol", idmapped: true },
    ],
  });
  await h.rt.run(spec);
  const exit = await h.exitEvent(spec.id);
  const lines = h.linesOf(spec.id);
  assert.equal(exit.exitCode, 0, `${lines.join("\n")}\n${exit.stderrTail}`);
  const map = lines.find((l) => l.startsWith("map "));
  const m = /^map \['0', '(\d+)', '65536'\]$/.exec(map ?? "");
  assert.ok(m, `uid_map: ${map}`);
  const hostRoot = Number(m[1]);
  assert.ok(hostRoot >= FIRST_HOST_ID, `root inside is host uid ${hostRoot}, not a privileged one`);
  assert.equal(
    lines.find((l) => l.startsWith("gmap ")),
    `gmap ['0', '${hostRoot}', '65536']`,
  );
  assert.ok(lines.includes("uid 0 passwd 0"), lines.join("\n"));
  // EACCES (13): root inside is "other" to a file of the host's root.
  assert.ok(lines.includes("host file: 13"), lines.join("\n"));
  assert.equal(readFileSync(hostFile, "utf8"), "host\n");
  // The volume: owned by root on disk, root's inside, and what root inside writes is root's on disk.
  assert.ok(lines.includes("volume file owner 0"), lines.join("\n"));
  assert.equal(readFileSync(join(volume, "before"), "utf8"), "from the host\nand from inside\n");
  assert.equal(statSync(join(volume, "made-inside")).uid, 0);
  // The container's own writes are in its range on the host (its upper dir, on its own disk).
  assert.equal(
    statSync(join(h.root, spec.id, "disk", "mnt", "upper", "etc", "written-inside")).uid,
    hostRoot,
  );
  await h.rt.delete(spec.id);
  assert.deepEqual(
    mountsUnder(h.dir).filter((p) => p.includes(spec.id)),
    [],
    "no idmapped mount is left behind",
  );
  assert.equal(existsSync(sharedRootfsPath(h.root)), false, "its root's mount point is gone with it");
  assert.equal(
    readFileSync(join(volume, "made-inside"), "utf8"),
    "new\n",
    "removing the container keeps the volume",
  );
});

test("two live containers never share a range", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const read = "print(open('/proc/self/uid_map').read().split()[1]); import time; time.sleep(30)";
  const a = h.spec(py(read), { userNamespace: true });
  const b = h.spec(py(read), { userNamespace: true });
  await h.rt.run(a);
  await h.rt.run(b);
  const ra = await waitFor(() => h.linesOf(a.id)[0], { timeoutMs: 20_000, what: "a's map" });
  const rb = await waitFor(() => h.linesOf(b.id)[0], { timeoutMs: 20_000, what: "b's map" });
  assert.notEqual(ra, rb);
  await h.rt.stop(a.id, { graceMs: 0 });
  await h.rt.stop(b.id, { graceMs: 0 });
});

// The agent configures eth0 in a named namespace; a user-namespaced container
// gets a namespace of its own, and its createRuntime hook moves eth0 in with
// its addresses and default route, then points the name at it (oci-spec.ts).
for (const given of [true, false]) {
  test(`a configured namespace is taken over, its addresses ${given ? "given" : "read by the hook"}`, async (t) => {
    if (!needs(t, { ...REQ, commands: [...REQ.commands, "ip"] })) return;
    const h = await runtimeHarness(t);
    const tag = randomBytes(3).toString("hex");
    const ns = `bt-un-${tag}`;
    const veth = `bt-unh-${tag}`;
    await ip("netns", "add", ns);
    t.after(async () => {
      await ip("netns", "delete", ns).catch(() => {});
      await ip("link", "delete", veth).catch(() => {});
    });
    await ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns);
    await ip("link", "set", veth, "up");
    for (const cmd of [
      ["addr", "add", "10.251.7.2/24", "dev", "eth0"],
      ["link", "set", "eth0", "up"],
      ["route", "add", "default", "via", "10.251.7.1", "dev", "eth0"],
    ]) {
      await ip("-n", ns, ...cmd);
    }
    const script = [
      "import time",
      "print('addr', '10.251.7.2' in open('/proc/net/fib_trie').read())",
      "routes = [l.split() for l in open('/proc/net/route').read().splitlines()[1:]]",
      "print('default via', [r[2] for r in routes if r[1] == '00000000'])",
      "time.sleep(30)",
    ].join("\n");
    const spec = h.spec(py(script), {
      userNamespace: true,
      netnsPath: `/run/netns/${ns}`,
      ...(given ? { netnsAddresses: { ipv4: "10.251.7.2/24", gateway4: "10.251.7.1" } } : {}),
    });
    const info = await h.rt.run(spec);
    const lines = await waitFor(() => (h.linesOf(spec.id).length >= 2 ? h.linesOf(spec.id) : undefined), {
      timeoutMs: 20_000,
      what: "the container's view of its network",
    });
    assert.ok(lines.includes("addr True"), lines.join("\n"));
    // 10.251.7.1, as /proc/net/route writes it (little-endian hex).
    assert.ok(lines.includes("default via ['0107FB0A']"), lines.join("\n"));
    // The name now stands for the container's own namespace.
    assert.equal(statSync(`/run/netns/${ns}`).ino, statSync(`/proc/${info.pid}/ns/net`).ino);
    await h.rt.delete(spec.id);
  });
}

test("eth0's addresses must be addresses: nothing else reaches the hook", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  for (const netnsAddresses of [
    { ipv4: "10.0.0.2/24\nlink delete eth0" },
    { ipv4: "10.0.0.2" },
    { ipv6: "10.0.0.2/24" },
    { gateway4: "10.0.0.1/24" },
    { ipv4: "10.0.0.2/33" },
    // A gang member's address (shared/gang.ts) reaches the hook the same way.
    { gang4: "10.251.0.2" },
    { gang4: "10.251.0.2/24\nlink delete eth0" },
  ]) {
    await assert.rejects(
      h.rt.run(h.spec(["true"], { userNamespace: true, netnsPath: "/proc/self/ns/net", netnsAddresses })),
      (e: Error & { code?: string }) => {
        assert.equal(e.code, "invalid_request");
        assert.match(e.message, /^netnsAddresses\.(ipv4|ipv6|gateway4|gang4) must be an IPv[46] address/);
        return true;
      },
    );
  }
});

test("two deletes of one exited container at once (coordinators removing it each) both succeed; nothing is left", async (t) => {
  if (!needs(t, REQ)) return;
  const h = await runtimeHarness(t);
  const scratch = mkdtempSync(join(tmpdir(), "berth-userns-"));
  t.after(() => rmSync(scratch, { recursive: true, force: true }));
  const spec = h.spec(py("print('done')"), {
    userNamespace: true,
    mounts: [{ source: scratch, destination: "/vol", idmapped: true }],
  });
  await h.rt.run(spec);
  assert.equal((await h.exitEvent(spec.id)).exitCode, 0);
  const results = await Promise.allSettled([
    h.rt.delete(spec.id),
    h.rt.delete(spec.id),
    h.rt.delete(spec.id),
  ]);
  assert.deepEqual(
    results.map((r) => (r.status === "rejected" ? String((r.reason as Error).message) : "ok")),
    ["ok", "ok", "ok"],
  );
  assert.equal(h.rt.get(spec.id), undefined);
  assert.deepEqual(
    mountsUnder(h.dir).filter((p) => p.includes(spec.id)),
    [],
    "no mount is left behind",
  );
  assert.equal(existsSync(join(h.root, spec.id)), false, "its bundle is gone");
});
