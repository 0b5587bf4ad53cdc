// The python3 process that makes a runtime's idmapped mounts (idmap.ts).
// Node has no open_tree/mount_setattr/move_mount, so a short program calls
// them through ctypes. It is started once and kept while containers start:
// a python3 start costs 20-40 ms on an idle 2-core host and several times
// that on a busy one, and every user-namespaced container start waited on
// one (two for a pre-warmed runner's code). It reads one JSON request a
// line and answers one line; it exits when its stdin closes: when the
// runtime closes it, after IDLE_MS without work, or when the agent dies.

import { type ChildProcessByStdio, spawn } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { createInterface } from "node:readline";
import type { Socket } from "node:net";
import { BerthError } from "../../shared/errors.ts";
import type { IdMap, IdmapMounter, IdmappedMount, TmpfsMount } from "./idmap.ts";

// Per request: makes a user namespace with the mapping (a child that
// unshares, whose maps the parent writes), then for each mount:
// open_tree(OPEN_TREE_CLONE) of the source, mount_setattr(MOUNT_ATTR_IDMAP
// [| RDONLY]) with that namespace, move_mount onto the target. The namespace
// lives on in the mounts. Then the tmpfs mounts, with mount(2).
const PROGRAM = String.raw`
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
OPEN_TREE, MOVE_MOUNT, MOUNT_SETATTR = 428, 429, 442
CLONE_NEWUSER, OPEN_TREE_CLONE, O_CLOEXEC = 0x10000000, 1, 0o2000000
AT_EMPTY_PATH, AT_FDCWD, MOVE_MOUNT_F_EMPTY_PATH = 0x1000, -100, 4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_IDMAP = 0x1, 0x100000
class Attr(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("set", "clr", "propagation", "userns_fd")]
class Failed(Exception):
    pass
def fail(what):
    raise Failed("%s: %s" % (what, os.strerror(ctypes.get_errno())))
def userns(host_id, size):
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        ok = libc.unshare(CLONE_NEWUSER) == 0
        os.write(ready_w, b"1" if ok else b"0")
        os.read(go_r, 1)
        os._exit(0)
    try:
        if os.read(ready_r, 1) != b"1":
            raise Failed("unshare(CLONE_NEWUSER) failed")
        line = "0 %d %d\n" % (host_id, size)
        for f in ("uid_map", "gid_map"):
            with open("/proc/%d/%s" % (pid, f), "w") as m:
                m.write(line)
        return os.open("/proc/%d/ns/user" % pid, os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.write(go_w, b"x")
        os.waitpid(pid, 0)
        for fd in (ready_r, ready_w, go_r, go_w):
            os.close(fd)
def serve(req):
    ns = userns(req["hostId"], req["size"]) if req["mounts"] else -1
    try:
        for m in req["mounts"]:
            fd = libc.syscall(OPEN_TREE, AT_FDCWD, m["source"].encode(), OPEN_TREE_CLONE | O_CLOEXEC)
            if fd < 0:
                fail("open_tree " + m["source"])
            try:
                attr = Attr(MOUNT_ATTR_IDMAP | (MOUNT_ATTR_RDONLY if m["readonly"] else 0), 0, 0, ns)
                if libc.syscall(MOUNT_SETATTR, fd, b"", AT_EMPTY_PATH, ctypes.byref(attr), ctypes.sizeof(attr)) != 0:
                    fail("idmapping " + m["source"] + " (mount_setattr; the file system must support idmapped mounts)")
                if libc.syscall(MOVE_MOUNT, fd, b"", AT_FDCWD, m["target"].encode(), MOVE_MOUNT_F_EMPTY_PATH) != 0:
                    fail("move_mount onto " + m["target"])
            finally:
                os.close(fd)
    finally:
        if ns >= 0:
            os.close(ns)
    for t in req["tmpfs"]:
        if libc.mount(b"tmpfs", t["target"].encode(), b"tmpfs", t["flags"], t["data"].encode()) != 0:
            fail("mounting a tmpfs at " + t["target"])
for line in sys.stdin:
    try:
        serve(json.loads(line))
        answer = {"ok": True}
    except Failed as e:
        answer = {"error": str(e)}
    except Exception as e:
        answer = {"error": "%s: %s" % (type(e).__name__, e)}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
`;

// Debian's python3 (one of the agent's packages), not whatever comes first on PATH (a version
// manager's shim costs 150 ms a start); -I -S: no user site, no site module.
const HOST_PYTHON = existsSync("/usr/bin/python3") ? "/usr/bin/python3" : "python3";

/** How long the helper may wait for work before it is let go. */
const IDLE_MS = 60_000;
/** How long one request may take; past it the helper is killed and the request fails. */
const REQUEST_TIMEOUT_MS = 30_000;

const HINT =
  "user namespaces need Linux 5.19 or later and the agent's data on a file system with idmapped mounts, such as ext4, xfs or btrfs; an operator can opt a workspace out: berth workspace limits WS --user-namespace off";

/** A running helper and the answers its requests wait for, in order. */
interface Helper {
  /** Its stdio pipes are sockets: they can be unref()ed. */
  child: ChildProcessByStdio<Socket, Socket, Socket>;
  waiting: ((line: string | Error) => void)[];
}

/** One helper process per runtime, started on first use; requests are served one at a time. */
export class IdmapHelper implements IdmapMounter {
  private helper?: Helper;
  private queue: Promise<unknown> = Promise.resolve();
  private idle?: NodeJS.Timeout;
  private closed = false;

  async mount(
    map: IdMap,
    mounts: readonly IdmappedMount[],
    tmpfs: readonly TmpfsMount[] = [],
  ): Promise<void> {
    if (mounts.length === 0 && tmpfs.length === 0) return;
    for (const m of [...mounts, ...tmpfs]) mkdirSync(m.target, { recursive: true });
    const req = JSON.stringify({ hostId: map.hostId, size: map.size, mounts, tmpfs });
    const run = this.queue.then(() => this.request(req));
    this.queue = run.catch(() => {});
    await run;
  }

  /** Lets the helper go (it exits at its stdin's end); mount() refuses from then on. */
  close(): void {
    this.closed = true;
    this.release();
  }

  private async request(req: string): Promise<void> {
    if (this.closed) throw new BerthError("failed_precondition", "this runtime was closed");
    clearTimeout(this.idle);
    const h = this.helper ?? this.start();
    const answer = new Promise<string | Error>((resolve) => h.waiting.push(resolve));
    h.child.stdout.ref();
    const timer = setTimeout(() => h.child.kill("SIGKILL"), REQUEST_TIMEOUT_MS);
    h.child.stdin.write(`${req}\n`);
    let got: string | Error;
    try {
      got = await answer;
    } finally {
      clearTimeout(timer);
      h.child.stdout.unref();
      if (this.helper === h) this.idle = setTimeout(() => this.release(), IDLE_MS).unref();
    }
    const error = got instanceof Error ? got.message : (JSON.parse(got) as { error?: string }).error;
    if (error !== undefined) {
      throw new BerthError(
        "internal",
        `cannot make the container's idmapped mounts: ${error.slice(-400)} (${HINT})`,
      );
    }
  }

  private start(): Helper {
    const child = spawn(HOST_PYTHON, ["-I", "-S", "-c", PROGRAM], {
      stdio: ["pipe", "pipe", "pipe"],
    }) as unknown as Helper["child"];
    const h: Helper = { child, waiting: [] };
    this.helper = h;
    // Between requests nothing of it keeps the agent's event loop alive.
    child.unref();
    child.stdin.unref();
    child.stderr.unref();
    let stderr = "";
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (d: string) => {
      stderr = (stderr + d).slice(-2000);
    });
    createInterface({ input: child.stdout }).on("line", (line) => h.waiting.shift()?.(line));
    const gone = (why: string) => {
      if (this.helper === h) this.helper = undefined;
      const detail = stderr.trim().split("\n").slice(-3).join(" ");
      for (const w of h.waiting.splice(0))
        w(new Error(`the idmap helper ${why}${detail ? `: ${detail}` : ""}`));
    };
    child.on("error", (e) => gone(`could not run (${e.message})`));
    child.on("exit", (code, signal) => gone(`exited (${signal ?? `code ${code}`})`));
    // Our end of a pipe it closed: the exit event says what happened.
    child.stdin.on("error", () => {});
    return h;
  }

  private release(): void {
    clearTimeout(this.idle);
    this.helper?.child.stdin.end();
    this.helper = undefined;
  }
}
