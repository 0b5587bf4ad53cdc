// The agent's half of the sandbox process server without a container: frame
// decoding, runc's failure line, and finding python3 inside an image's rootfs.

import assert from "node:assert/strict";
import { chmodSync, mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import {
  encodeInitFrame,
  InitFrame,
  InitFrameDecoder,
  MAX_INIT_FRAME,
  runcStyleFailure,
} from "../../agent/host/init-exec.ts";
import { findCommandInRootfs, resolveInRootfs } from "../../agent/host/sandbox-init.ts";
import { tempDir } from "../helpers/env.ts";

test("frames split anywhere come out whole", () => {
  const stream = Buffer.concat([
    encodeInitFrame(InitFrame.stdout, Buffer.from("hello")),
    encodeInitFrame(InitFrame.closeStdin),
    encodeInitFrame(InitFrame.exit, Buffer.from('{"exit_code":3}')),
  ]);
  for (let cut = 0; cut <= stream.length; cut++) {
    const d = new InitFrameDecoder();
    const frames = [...d.push(stream.subarray(0, cut)), ...d.push(stream.subarray(cut))];
    assert.deepEqual(
      frames.map((f) => [f.kind, f.payload.toString()]),
      [
        [InitFrame.stdout, "hello"],
        [InitFrame.closeStdin, ""],
        [InitFrame.exit, '{"exit_code":3}'],
      ],
    );
  }
  assert.deepEqual([...encodeInitFrame(InitFrame.stdin, Buffer.from("x"))], [0x49, 0, 0, 0, 1, 0x78]);
});

test("a frame over the limit is refused from its header", () => {
  const header = Buffer.alloc(5);
  header[0] = InitFrame.stdout;
  header.writeUInt32BE(MAX_INIT_FRAME + 1, 1);
  assert.throws(() => new InitFrameDecoder().push(header), /over the 1048576 limit/);
});

test("failures read as runc exec writes them", () => {
  const base = { args: ["nope"], env: {}, tty: false };
  const line = (r: typeof base & { cwd?: string }, f: Record<string, unknown>) =>
    /msg="(.*)"\n$/.exec(runcStyleFailure(r, f))?.[1];
  assert.equal(
    line(base, { stage: "exec", errno: 2, message: "No such file or directory" }),
    'exec failed: unable to start container process: exec: \\"nope\\": executable file not found in $PATH',
  );
  assert.equal(
    line({ ...base, args: ["/etc"] }, { stage: "exec", errno: 13, message: "Permission denied" }),
    'exec failed: unable to start container process: exec: \\"/etc\\": permission denied',
  );
  assert.equal(
    line({ ...base, cwd: "/x" }, { stage: "cwd", errno: 2, message: "No such file or directory" }),
    'exec failed: unable to start container process: chdir to cwd (\\"/x\\") set in config.json failed: no such file or directory',
  );
});

test("python3 is found through the rootfs's own symlinks, never the host's", (t) => {
  const root = join(tempDir(t), "rootfs");
  mkdirSync(join(root, "usr", "bin"), { recursive: true });
  writeFileSync(join(root, "usr", "bin", "python3.11"), "");
  chmodSync(join(root, "usr", "bin", "python3.11"), 0o755);
  symlinkSync("python3.11", join(root, "usr", "bin", "python3"));
  symlinkSync("usr/bin", join(root, "bin"));
  // Absolute targets are taken inside the rootfs: /usr/bin here, not the host's.
  mkdirSync(join(root, "opt"));
  symlinkSync("/usr/bin/python3", join(root, "opt", "py"));
  symlinkSync("/../../../../../usr/bin/sh", join(root, "opt", "escape"));
  assert.equal(resolveInRootfs(root, "/opt/py"), join(root, "usr", "bin", "python3.11"));
  assert.equal(resolveInRootfs(root, "/opt/escape"), undefined, "the host's /usr/bin/sh is not the image's");
  writeFileSync(join(root, "usr", "bin", "sh"), "");
  assert.equal(resolveInRootfs(root, "/opt/escape"), join(root, "usr", "bin", "sh"));
  assert.equal(findCommandInRootfs(root, { PATH: "/bin" }, "python3"), "/bin/python3");
  assert.equal(findCommandInRootfs(root, {}, "python3"), "/usr/bin/python3");
  assert.equal(findCommandInRootfs(root, { PATH: "/usr/local/bin:relative" }, "python3"), undefined);
  assert.equal(findCommandInRootfs(root, {}, "sh"), undefined, "not executable");
  symlinkSync("loop", join(root, "opt", "loop"));
  assert.equal(resolveInRootfs(root, "/opt/loop"), undefined);
});
