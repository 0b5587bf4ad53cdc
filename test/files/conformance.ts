// One suite for ContainerFilesApi, run against ContainerHost and against the
// gRPC client talking to a real agent server: the same answers either way.

import { waitFor } from "../../shared/net.ts";
import assert from "node:assert/strict";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import type { TestContext } from "node:test";
import type { ContainerApi } from "../../api/index.ts";
import type { ContainerFilesApi } from "../../api/index.ts";
import { bytesOf, drain, randomStream, rejectsWith, sh, textOf } from "./harness.ts";

type Api = ContainerApi & ContainerFilesApi;

const MB = 1024 * 1024;

export async function filesConformance(t: TestContext, api: Api, id: string): Promise<void> {
  await t.test("stat and list show the container's own files and names", async () => {
    const root = await api.statPath(id, "/");
    assert.equal(root.isDir, true);
    assert.equal(root.name, "");
    assert.equal(root.path, "/");
    const passwd = await api.statPath(id, "etc/passwd");
    assert.equal(passwd.path, "/etc/passwd");
    assert.equal(passwd.name, "passwd");
    assert.equal(passwd.isDir, false);
    assert.equal(passwd.permissions, "-rw-r--r--");
    assert.equal(passwd.owner, "root");
    assert.equal(passwd.group, "root");
    assert.equal(passwd.size, Buffer.byteLength(await sh(api, id, "cat /etc/passwd")));
    await sh(api, id, "mkdir -p /l && touch /l/b /l/a && mkdir /l/c && chown 65534:65534 /l/a");
    const entries = await api.listDir(id, "/l");
    assert.deepEqual(
      entries.map((e) => [e.path, e.isDir]),
      [
        ["/l/a", false],
        ["/l/b", false],
        ["/l/c", true],
      ],
    );
    // nobody/nogroup come from the container's /etc/passwd and /etc/group.
    assert.equal(entries[0]!.owner, "nobody");
    assert.equal(entries[0]!.group, "nogroup");
    assert.match(entries[2]!.permissions, /^d/);
  });

  await t.test("a 20 MB file goes up and comes down streamed, in 64 KiB chunks", async () => {
    const up = randomStream(20 * MB);
    const info = await api.writeFile(id, "/data/big.bin", up.data, { mode: 0o600 });
    assert.equal(info.size, 20 * MB);
    assert.equal(info.permissions, "-rw-------");
    assert.equal((await sh(api, id, "sha256sum /data/big.bin")).split(" ")[0], up.sha256());
    const down = await drain(api.readFile(id, "/data/big.bin"));
    assert.equal(down.size, 20 * MB);
    assert.equal(down.sha256, up.sha256());
    assert.ok(down.maxChunk <= 64 * 1024, `chunks of at most 64 KiB, got ${down.maxChunk}`);
    assert.equal(await sh(api, id, "ls -a /data"), ".\n..\nbig.bin\n", "no temp file left");
  });

  await t.test("an upload that fails midway leaves nothing behind", async () => {
    async function* failing() {
      yield new Uint8Array(100_000);
      throw new Error("the source broke");
    }
    await assert.rejects(api.writeFile(id, "/data/partial.bin", failing()));
    // Over gRPC the agent learns of the cancel after the client's call has failed: its cleanup may lag a moment.
    let listing = "";
    await waitFor(
      async () => {
        listing = await sh(api, id, "ls -a /data");
        return listing === ".\n..\nbig.bin\n";
      },
      { timeoutMs: 10_000, what: "the partial upload's temporary file to be removed" },
    ).catch(() => {});
    assert.equal(listing, ".\n..\nbig.bin\n");
  });

  await t.test(
    "directories: create, delete; wrong kinds and missing paths are refused with the path",
    async () => {
      const d = await api.createDirectory(id, "/work/a/b");
      assert.equal(d.isDir, true);
      assert.equal(d.path, "/work/a/b");
      await api.writeFile(id, "/work/a/b/x.txt", bytesOf("hello\n"));
      assert.equal(await textOf(api.readFile(id, "/work/a/b/x.txt")), "hello\n");
      await assert.rejects(api.deleteFile(id, "/work/a"), rejectsWith("path_invalid", "/work/a"));
      await assert.rejects(
        api.deleteDirectory(id, "/work/a/b/x.txt"),
        rejectsWith("path_invalid", "/work/a/b/x.txt"),
      );
      await assert.rejects(api.deleteDirectory(id, "/"), rejectsWith("path_invalid", "/"));
      await assert.rejects(
        api.readFile(id, "/work")[Symbol.asyncIterator]().next(),
        rejectsWith("path_invalid", "/work"),
      );
      await assert.rejects(
        api.listDir(id, "/work/a/b/x.txt"),
        rejectsWith("path_invalid", "/work/a/b/x.txt"),
      );
      await assert.rejects(api.statPath(id, "/nope/x"), rejectsWith("path_not_found", "/nope/x"));
      await assert.rejects(api.deleteFile(id, "/nope"), rejectsWith("path_not_found", "/nope"));
      await assert.rejects(
        api.readFile(id, "/nope")[Symbol.asyncIterator]().next(),
        rejectsWith("path_not_found", "/nope"),
      );
      await api.deleteFile(id, "/work/a/b/x.txt");
      await assert.rejects(
        api.statPath(id, "/work/a/b/x.txt"),
        rejectsWith("path_not_found", "/work/a/b/x.txt"),
      );
      await api.deleteDirectory(id, "/work/a");
      assert.equal(await sh(api, id, "ls -a /work"), ".\n..\n");
      await assert.rejects(api.statPath("ctr-no-such", "/"), rejectsWith("not_found"));
    },
  );

  await t.test(
    "find: regex per line with 1-based ranges; binary files skipped; bad pattern refused",
    async () => {
      await api.writeFile(id, "/src/a.py", bytesOf("x = 1\n# TODO: one\nprint('é TODO two')\n"));
      await api.writeFile(id, "/src/sub/b.txt", bytesOf("nothing\nTODO\n"));
      await api.writeFile(id, "/src/bin.dat", bytesOf("TODO\0binary"));
      const matches = await api.findInFiles(id, "/src", "TODO");
      assert.deepEqual(
        matches.map((m) => [m.path, m.line, m.range.start.line, m.range.start.column, m.range.end.column]),
        [
          ["/src/a.py", "# TODO: one", 2, 3, 7],
          ["/src/a.py", "print('é TODO two')", 3, 10, 14],
          ["/src/sub/b.txt", "TODO", 2, 1, 5],
        ],
      );
      assert.equal((await api.findInFiles(id, "/src/sub/b.txt", "^no")).length, 1);
      await assert.rejects(api.findInFiles(id, "/src", "(unclosed"), rejectsWith("invalid_request"));
      await assert.rejects(api.findInFiles(id, "/missing", "x"), rejectsWith("path_not_found", "/missing"));
    },
  );

  await t.test("replace: literal, every occurrence, mode kept", async () => {
    await api.writeFile(id, "/src/c.cfg", bytesOf("a.b a.b axb\n"), { mode: 0o640 });
    const res = await api.replaceInFiles(id, "/src", "a.b", "Z");
    assert.deepEqual(res, [{ path: "/src/c.cfg", replacements: 2 }]);
    assert.equal(await sh(api, id, "cat /src/c.cfg"), "Z Z axb\n");
    assert.equal((await api.statPath(id, "/src/c.cfg")).permissions, "-rw-r-----");
  });

  await t.test("symlinks made in the container never lead out of its root", async () => {
    const marker = `/tmp/berth-escape-${randomBytes(6).toString("hex")}`;
    const hostEtc = `/etc/berth-escape-${randomBytes(6).toString("hex")}`;
    writeFileSync(marker, "host secret");
    t.after(() => rmSync(marker, { force: true }));
    await sh(
      api,
      id,
      [
        "mkdir -p /esc/d",
        "ln -s / /esc/root",
        "ln -s /etc /esc/etc",
        "ln -s ../../../../../.. /esc/d/up",
        "ln -s /etc/passwd /esc/pw",
        `ln -s ${marker} /esc/marker`,
        `ln -s ${hostEtc} /esc/newetc`,
        "ln -s /esc/loop /esc/loop",
      ].join(" && "),
    );
    // Reads: the container's files, never the host's.
    const containerPasswd = await sh(api, id, "cat /etc/passwd");
    assert.equal(await textOf(api.readFile(id, "/esc/pw")), containerPasswd);
    assert.equal(await textOf(api.readFile(id, "/esc/root/etc/passwd")), containerPasswd);
    assert.equal(await textOf(api.readFile(id, "/esc/d/up/etc/passwd")), containerPasswd);
    assert.equal(await textOf(api.readFile(id, "/../../../etc/passwd")), containerPasswd);
    await assert.rejects(
      api.readFile(id, `/esc/root${marker}`)[Symbol.asyncIterator]().next(),
      rejectsWith("path_not_found"),
    );
    await assert.rejects(
      api.readFile(id, "/esc/marker")[Symbol.asyncIterator]().next(),
      rejectsWith("path_not_found"),
    );
    // Writes through links (final and parent components) land in the container.
    const name = hostEtc.slice("/etc/".length);
    await api.writeFile(id, `/esc/etc/${name}`, bytesOf("via parent link"));
    assert.equal(await sh(api, id, `cat ${hostEtc}`), "via parent link");
    assert.ok(!existsSync(hostEtc), "the host's /etc is untouched");
    await api.writeFile(id, "/esc/newetc", bytesOf("via final link"));
    assert.equal(await sh(api, id, `cat ${hostEtc}`), "via final link");
    assert.ok(!existsSync(hostEtc), "the host's /etc is untouched");
    await api.writeFile(id, `/esc/d/up/etc/${name}-up`, bytesOf("via .."));
    assert.equal(await sh(api, id, `cat ${hostEtc}-up`), "via ..");
    assert.ok(!existsSync(`${hostEtc}-up`));
    await api.writeFile(id, "/esc/marker", bytesOf("container"));
    assert.equal(
      readFileSync(marker, "utf8"),
      "host secret",
      "the host file behind an absolute link is untouched",
    );
    assert.equal(await sh(api, id, `cat ${marker}`), "container");
    await api.createDirectory(id, "/esc/root/tmp/made-through-link");
    assert.equal(await sh(api, id, "test -d /tmp/made-through-link && echo yes"), "yes\n");
    // A link is never taken for the directory it points to when deleting.
    await assert.rejects(api.deleteDirectory(id, "/esc/root"), rejectsWith("path_invalid", "/esc/root"));
    await api.deleteFile(id, "/esc/root");
    assert.equal(await sh(api, id, "test -f /etc/passwd && echo still"), "still\n");
    const link = await api.statPath(id, "/esc/etc");
    assert.equal(link.isSymlink, true);
    assert.equal(link.isDir, false);
    await assert.rejects(api.statPath(id, "/esc/loop/x"), rejectsWith("path_invalid", "/esc/loop/x"));
    await sh(api, id, `rm -rf /esc ${hostEtc} ${hostEtc}-up ${marker}`);
  });
}
