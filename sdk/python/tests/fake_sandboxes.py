"""The sandbox and pod gateway routes of docs/sandboxes.md, on a FakeGateway, in memory and on disk.

A sandbox is a temporary directory standing in for the container's root:
sandbox paths resolve inside it (".." stops at it, as the agent does), and
``exec`` runs the real program as a local process with its output kept in
bounded buffers by byte offset (tests/fake_processes.py), streamed chunked with ``follow``. Uploads are
read from the socket in blocks, downloads sent in blocks.
"""

import datetime
import grp
import json
import os
import posixpath
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
from urllib.parse import parse_qs, urlsplit

from tests.fake_processes import BLOCK, Process

PREFIX = "/api/v1/gateway"


class Refusal(Exception):
    def __init__(self, code, message, status=200, details=None):
        super().__init__(message)
        self.code, self.message, self.status, self.details = code, message, status, details


class Sandbox:
    def __init__(self, cid, stub_id, stub, gw_url):
        self.cid, self.stub_id = cid, stub_id
        self.root = tempfile.mkdtemp(prefix="fake-sandbox-")
        extra = stub.get("extra", {}) if stub else {}
        self.ttl = extra.get("ttl_seconds", 600)
        self.network = {"block_network": extra.get("block_network", False), "allow_list": extra.get("allow_list")}
        self.gw_url = gw_url
        self.ports = list(extra.get("ports") or [])
        self.processes = {}
        self.status = "running"

    def urls(self):
        return {str(p): f"{self.gw_url}/port/{self.cid}/{p}/" for p in self.ports}

    def host_path(self, path, must_exist=True):
        norm = posixpath.normpath("/" + path.lstrip("/"))
        host = os.path.join(self.root, norm.lstrip("/")) if norm != "/" else self.root
        if must_exist and not os.path.lexists(host):
            raise Refusal("path_not_found", f"no file or directory at {path}", details={"path": path})
        return host

    def file_info(self, path, host):
        st = os.lstat(host)
        norm = posixpath.normpath("/" + path.lstrip("/"))
        try:
            owner = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            owner = str(st.st_uid)
        try:
            group = grp.getgrgid(st.st_gid).gr_name
        except KeyError:
            group = str(st.st_gid)
        mtime = datetime.datetime.fromtimestamp(st.st_mtime, datetime.timezone.utc)
        return {
            "name": posixpath.basename(norm),
            "path": norm,
            "size": st.st_size,
            "is_dir": stat.S_ISDIR(st.st_mode),
            "is_symlink": stat.S_ISLNK(st.st_mode),
            "mod_time": mtime.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "mode": st.st_mode & 0o7777,
            "permissions": stat.filemode(st.st_mode),
            "owner": owner,
            "group": group,
            "uid": st.st_uid,
            "gid": st.st_gid,
        }

    def stop(self):
        for p in self.processes.values():
            if p.proc.poll() is None:
                p.proc.kill()
            p.proc.wait()
            for t in p.pumps:
                t.join()
            for pipe in (p.proc.stdin, p.proc.stdout, p.proc.stderr):
                if pipe and not pipe.closed:
                    pipe.close()
        self.status = "terminated"
        shutil.rmtree(self.root, ignore_errors=True)


class FakeSandboxes:
    """Attach to a FakeGateway: ``FakeSandboxes(gw)``; ``close()`` stops every process and removes the roots."""

    def __init__(self, gw):
        self.gw = gw
        self.lock = threading.Lock()
        self.sandboxes = {}
        self.pods = []  # bodies of POST /pods
        # Pod id → its record: an entrypoint of `true` finishes at once (exit code 0), as the coordinator answers it.
        self.pod_records = {}
        self.deployments = []  # bodies of POST /deployments
        self.images = []
        self.output_limit = 1 << 20
        self.criu = False
        # Process waits and output follows to break off (a coordinator that dies under them): how many
        # of each are cut, the output after sending `cut_after` bytes.
        self.cut = {"wait": 0, "output": 0, "run": 0}
        self.cut_after = 0
        # A coordinator from before exec in one round trip: POST .../processes/run is not a route.
        self.no_run_route = False
        # The client address of each POST .../processes/run (which connection carried it), and whether
        # the connection is closed after the run's answer (a coordinator's idle timeout, say).
        self.run_peers = []
        self.close_after_run = False
        self.seq = 0
        gw.routes.append(self.route)

    def close(self):
        with self.lock:
            boxes = list(self.sandboxes.values())
        for sb in boxes:
            if sb.status == "running":
                sb.stop()

    def next_id(self, prefix):
        with self.lock:
            self.seq += 1
            return f"{prefix}-{self.seq:04d}"

    # ---- dispatch ----

    def route(self, h, method):
        parts = urlsplit(h.path)
        if not parts.path.startswith((PREFIX + "/sandboxes", PREFIX + "/pods")) and parts.path != PREFIX + "/deployments":
            return False
        qs = {k: v[0] for k, v in parse_qs(parts.query).items()}
        h.consumed = 0
        try:
            self.dispatch(h, method, parts.path[len(PREFIX) :], qs)
        except Refusal as e:
            self.drain(h)
            err = {"code": e.code, "message": e.message}
            if e.details:
                err["details"] = e.details
            h.send_json({"ok": False, "error": err} if e.status == 200 else {"error": err}, e.status)
        return True

    @staticmethod
    def drain(h):
        """Reads what is left of the request body in blocks, so the kept-alive connection stays in step."""
        left = int(h.headers.get("Content-Length") or 0) - getattr(h, "consumed", 0)
        data = bytearray()
        while left > 0:
            block = h.rfile.read(min(BLOCK, left))
            if not block:
                break
            data += block
            left -= len(block)
        h.consumed = int(h.headers.get("Content-Length") or 0)
        return bytes(data)

    def json_body(self, h):
        return json.loads(self.drain(h) or b"{}")

    def sandbox(self, sid, raw=False):
        sb = self.sandboxes.get(sid)
        status = 404 if raw else 200
        if sb is None:
            raise Refusal("not_found", f"sandbox {sid} not found", status)
        if sb.status != "running":
            raise Refusal("sandbox_terminated", f"sandbox {sid} was terminated", 409 if raw else 200)
        return sb

    def dispatch(self, h, method, path, qs):
        if path == "/pods" and method == "POST":
            body = self.json_body(h)
            stub = self.stub(body["stub_id"])
            cid = self.next_id("ctr")
            self.pods.append(body)
            urls = {str(p): f"{self.gw.url}/port/{cid}/{p}/" for p in stub["extra"].get("ports") or []}
            first = next(iter(urls.values()), "")
            command = body.get("entrypoint") or stub["extra"].get("entrypoint") or []
            finished = command[:1] == ["true"]
            record = {"status": "terminated" if finished else "running", "exit_code": 0 if finished else None}
            self.pod_records[cid] = record
            return h.send_json({"ok": True, "container_id": cid, "url": first, "urls": urls, **record})
        if path.startswith("/pods/") and method == "GET":
            record = self.pod_records.get(path[len("/pods/") :])
            if record is None:
                raise Refusal("not_found", f"pod {path[len('/pods/'):]} not found")
            return h.send_json({"ok": True, "kind": "pod", **record})
        if path == "/deployments" and method == "POST":
            body = self.json_body(h)
            if body["type"] != "pod":
                raise Refusal("invalid_request", "this fake deploys pods only")
            self.deployments.append(body)
            dep = {"id": self.next_id("dep"), "name": body["name"], "type": "pod", "url": f"{self.gw.url}/endpoint/{body['name']}"}
            return h.send_json({"ok": True, "deployment": dep})
        if path == "/sandboxes" and method == "POST":
            body = self.json_body(h)
            return self.start(h, body["stub_id"])
        if path == "/sandboxes/from-memory-snapshot" and method == "POST":
            snap = self.json_body(h)["snapshot_id"]
            if not snap.startswith("snap-"):
                raise Refusal("not_found", f"snapshot {snap} not found")
            return self.start(h, None)
        m = re.match(r"^/sandboxes/([^/]+)(/.*)?$", path)
        if not m:
            raise Refusal("route_not_found", path)
        sid, tail = m.group(1), m.group(2) or ""
        raw = tail in ("/files/content",) or tail.endswith("/output")
        if method == "GET" and tail == "":
            sb = self.sandboxes.get(sid)
            if sb is None:
                raise Refusal("not_found", f"sandbox {sid} not found")
            return h.send_json({"ok": True, "sandbox_id": sid, "stub_id": sb.stub_id, "status": sb.status,
                                "ttl_seconds": sb.ttl, "urls": sb.urls(), "network": sb.network})
        sb = self.sandbox(sid, raw=raw)
        if tail.startswith("/processes"):
            return self.processes(h, method, sb, tail[len("/processes") :], qs)
        if tail.startswith("/files") or tail == "/directories":
            return self.files(h, method, sb, tail, qs)
        body = self.json_body(h) if method == "POST" else {}
        if tail == "/terminate":
            sb.stop()
            return h.send_json({"ok": True, "terminated": True})
        if tail == "/ttl":
            sb.ttl = body["ttl_seconds"]
            return h.send_json({"ok": True, "expires_at": None if sb.ttl == -1 else "2030-01-01T00:00:00Z"})
        if tail == "/network":
            if body.get("block_network") and body.get("allow_list"):
                raise Refusal("invalid_request", "block_network cannot be combined with a non-empty allow_list")
            sb.network = {"block_network": body["block_network"], "allow_list": body["allow_list"] or None}
            return h.send_json({"ok": True, "network": sb.network})
        if tail == "/ports" and method == "POST":
            sb.ports.append(body["port"])
            return h.send_json({"ok": True, "port": body["port"], "url": sb.urls()[str(body["port"])]})
        if tail == "/ports":
            return h.send_json({"ok": True, "urls": sb.urls()})
        if tail == "/snapshots/filesystem":
            image_id = self.next_id("img")
            self.images.append((image_id, sid))
            return h.send_json({"ok": True, "image_id": image_id})
        if tail == "/snapshots/memory":
            if not self.criu:
                raise Refusal("checkpoint_unavailable", "criu check failed: no kernel support")
            return h.send_json({"ok": True, "snapshot_id": self.next_id("snap")})
        raise Refusal("route_not_found", path)

    def stub(self, stub_id):
        for body in self.gw.stub_bodies:
            if "stub-" + body["name"] == stub_id:
                return body
        raise Refusal("not_found", f"stub {stub_id} not found")

    def start(self, h, stub_id):
        stub = self.stub(stub_id) if stub_id else None
        cid = self.next_id("ctr")
        sb = Sandbox(cid, stub_id or "", stub, self.gw.url)
        with self.lock:
            self.sandboxes[cid] = sb
        h.send_json({"ok": True, "sandbox_id": cid, "container_id": cid, "stub_id": sb.stub_id,
                     "urls": sb.urls(), "expires_at": "2030-01-01T00:00:00Z"})

    # ---- processes ----

    def process(self, sb, pid_text, raw=False):
        p = sb.processes.get(int(pid_text)) if pid_text.isdigit() else None
        if p is None:
            raise Refusal("process_not_found", f"no process {pid_text} in sandbox {sb.cid}", 404 if raw else 200)
        return p

    def start_process(self, h, sb):
        body = self.json_body(h)
        cwd = sb.host_path(body.get("cwd") or "/")
        env = dict(os.environ, **(body.get("env") or {}))
        proc = subprocess.Popen(body["args"], cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        pid = len(sb.processes) + 1
        sb.processes[pid] = Process(pid, body["args"], body.get("cwd") or "/", proc, self.output_limit)
        return sb.processes[pid]

    def run(self, h, p):
        """POST .../processes/run: frames (kind, 4-byte length, payload) of the start, output and exit."""
        h.send_response(200)
        h.send_header("Content-Type", "application/vnd.berth.process-run")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def frame(kind, payload):
            data = bytes([kind]) + len(payload).to_bytes(4, "big") + payload
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()

        frame(0x50, json.dumps(p.json()).encode())
        cut = self.take_cut("run")
        pos = {"stdout": 0, "stderr": 0}
        sent = 0
        while True:
            with p.cond:
                while all(p.bufs[n].end <= pos[n] for n in pos) and not p.done:
                    p.cond.wait()
                chunks = []
                for n in pos:
                    buf = p.bufs[n]
                    at = max(pos[n], buf.start)
                    chunks.append((n, bytes(buf.data[at - buf.start :])))
                    pos[n] = buf.end
                finished = p.done
            for n, chunk in chunks:
                if not chunk:
                    continue
                if cut and sent + len(chunk) > self.cut_after:
                    chunk = chunk[: self.cut_after - sent]
                    if chunk:
                        frame(0x4F if n == "stdout" else 0x45, chunk)
                    return self.hang_up(h)
                frame(0x4F if n == "stdout" else 0x45, chunk)
                sent += len(chunk)
            if finished:
                break
        p.proc.wait()
        frame(0x58, json.dumps({"exit_code": p.exit_code(), "status": "exited"}).encode())
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()
        if self.close_after_run:
            self.hang_up(h)

    def processes(self, h, method, sb, tail, qs):
        if tail == "/run" and method == "POST":
            if self.no_run_route:
                raise Refusal("route_not_found", "no route POST .../processes/run", 404)
            try:
                p = self.start_process(h, sb)
            except Refusal as e:
                # A raw route: refusals carry their HTTP status, as the coordinator's do.
                e.status = 404 if e.code.endswith("not_found") else 400
                raise
            self.run_peers.append(h.client_address)
            return self.run(h, p)
        if tail == "" and method == "POST":
            body = self.json_body(h)
            cwd = sb.host_path(body.get("cwd") or "/")
            env = dict(os.environ, **(body.get("env") or {}))
            proc = subprocess.Popen(body["args"], cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
            pid = len(sb.processes) + 1
            sb.processes[pid] = Process(pid, body["args"], body.get("cwd") or "/", proc, self.output_limit)
            return h.send_json({"ok": True, "pid": pid})
        if tail == "":
            return h.send_json({"ok": True, "processes": [p.json() for p in sb.processes.values()]})
        m = re.match(r"^/([^/]+)(/.*)?$", tail)
        p = self.process(sb, m.group(1), raw=(m.group(2) == "/output"))
        op = m.group(2) or ""
        if op == "":
            return h.send_json({"ok": True, **p.json()})
        if op == "/output":
            return self.output(h, p, qs)
        if op == "/stdin":
            data = self.drain(h)
            p.proc.stdin.write(data)
            p.proc.stdin.flush()
            if qs.get("eof") == "true":
                p.proc.stdin.close()
            return h.send_json({"ok": True, "written": len(data)})
        body = self.json_body(h)
        if op == "/kill":
            p.proc.send_signal(getattr(signal, body.get("signal") or "SIGKILL"))
            return h.send_json({"ok": True, "killed": True})
        if op == "/wait":
            if self.take_cut("wait"):
                return self.hang_up(h)
            try:
                p.proc.wait(timeout=body.get("timeout_seconds"))
                code = p.exit_code()
            except subprocess.TimeoutExpired:
                code = -1
            return h.send_json({"ok": True, "exit_code": code, "status": "running" if code == -1 else "exited"})
        raise Refusal("route_not_found", op)

    def output(self, h, p, qs):
        buf = p.bufs[qs.get("stream", "stdout")]
        follow = qs.get("follow") == "true"
        with p.cond:
            pos = max(int(qs.get("offset", "0")), buf.start)
            start = buf.start
        h.send_response(200)
        h.send_header("Content-Type", "application/octet-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.send_header("X-Output-Start", str(start))
        h.end_headers()
        cut = self.take_cut("output")
        while True:
            with p.cond:
                while follow and buf.end <= pos and not p.done:
                    p.cond.wait()
                pos = max(pos, buf.start)
                chunk = bytes(buf.data[pos - buf.start :])
                finished = not follow or p.done
            if cut and pos + len(chunk) > int(qs.get("offset", "0")) + self.cut_after:
                chunk = chunk[: max(0, int(qs.get("offset", "0")) + self.cut_after - pos)]
                if chunk:
                    h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    h.wfile.flush()
                return self.hang_up(h)
            if chunk:
                h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                h.wfile.flush()
                pos += len(chunk)
            elif finished:
                break
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    def take_cut(self, kind):
        with self.lock:
            if self.cut[kind] <= 0:
                return False
            self.cut[kind] -= 1
            return True

    @staticmethod
    def hang_up(h):
        """The connection ends without (the rest of) an answer, as when the coordinator serving it is killed."""
        h.close_connection = True
        try:
            h.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # ---- files ----

    def files(self, h, method, sb, tail, qs):
        path = qs.get("path", "")
        if tail == "/directories" and method == "POST":
            path = self.json_body(h)["path"]
            host = sb.host_path(path, must_exist=False)
            if os.path.lexists(host) and not os.path.isdir(host):
                raise Refusal("path_invalid", f"{path} exists and is not a directory", details={"path": path})
            os.makedirs(host, exist_ok=True)
            return h.send_json({"ok": True, "file": sb.file_info(path, host)})
        if tail == "/directories" and method == "DELETE":
            host = sb.host_path(path)
            if not os.path.isdir(host) or host == sb.root:
                raise Refusal("path_invalid", f"{path} is not a directory that can be removed", details={"path": path})
            shutil.rmtree(host)
            return h.send_json({"ok": True, "deleted": True})
        if tail == "/files/content" and method == "PUT":
            return self.upload(h, sb, path, qs.get("mode"))
        if tail in ("/files/find", "/files/replace"):
            body = self.json_body(h)
            return self.search(h, sb, tail, body)
        host = sb.host_path(path, must_exist=True) if tail != "/files/content" else self.raw_host(sb, path)
        if tail == "/files/stat":
            return h.send_json({"ok": True, "file": sb.file_info(path, host)})
        if tail == "/files/list":
            if not os.path.isdir(host):
                raise Refusal("path_invalid", f"{path} is not a directory", details={"path": path})
            names = sorted(os.listdir(host))
            files = [sb.file_info(posixpath.join(path, n), os.path.join(host, n)) for n in names]
            return h.send_json({"ok": True, "files": files})
        if tail == "/files" and method == "DELETE":
            if os.path.isdir(host) and not os.path.islink(host):
                raise Refusal("path_invalid", f"{path} is a directory: use delete_directory", details={"path": path})
            os.unlink(host)
            return h.send_json({"ok": True, "deleted": True})
        if tail == "/files/content":
            h.send_response(200)
            h.send_header("Content-Type", "application/octet-stream")
            h.send_header("Content-Length", str(os.path.getsize(host)))
            h.end_headers()
            with open(host, "rb") as f:
                shutil.copyfileobj(f, h.wfile, BLOCK)
            return None
        raise Refusal("route_not_found", tail)

    def raw_host(self, sb, path):
        try:
            host = sb.host_path(path)
        except Refusal as e:
            e.status = 404
            raise
        if not os.path.isfile(host):
            raise Refusal("path_invalid", f"{path} is not a regular file", 400, {"path": path})
        return host

    def upload(self, h, sb, path, mode):
        host = sb.host_path(path, must_exist=False)
        if os.path.isdir(host):
            raise Refusal("path_invalid", f"{path} is a directory", details={"path": path})
        os.makedirs(os.path.dirname(host), exist_ok=True)
        left = int(h.headers.get("Content-Length") or 0)
        with open(host, "wb") as f:
            while left > 0:
                block = h.rfile.read(min(BLOCK, left))
                if not block:
                    break
                f.write(block)
                left -= len(block)
                h.consumed += len(block)
        os.chmod(host, int(mode, 8) if mode else 0o644)
        h.send_json({"ok": True, "file": sb.file_info(path, host)})

    def search(self, h, sb, tail, body):
        path = body["path"]
        host = sb.host_path(path)
        targets = []
        if os.path.isdir(host):
            for dirpath, _, names in os.walk(host):
                targets.extend(os.path.join(dirpath, n) for n in sorted(names))
        else:
            targets.append(host)

        def container_path(t):
            return "/" + os.path.relpath(t, sb.root)

        if tail == "/files/find":
            pattern = re.compile(body["pattern"])
            matches = []
            for t in targets:
                with open(t, encoding="utf-8", errors="replace") as f:
                    for i, line in enumerate(f, 1):
                        for m in pattern.finditer(line.rstrip("\n")):
                            rng = {"start": {"line": i, "column": m.start() + 1}, "end": {"line": i, "column": m.end() + 1}}
                            matches.append({"path": container_path(t), "line": line.rstrip("\n"), "range": rng})
            return h.send_json({"ok": True, "matches": matches})
        files = []
        for t in targets:
            with open(t, encoding="utf-8") as f:
                text = f.read()
            n = text.count(body["old_string"])
            if n:
                with open(t, "w", encoding="utf-8") as f:
                    f.write(text.replace(body["old_string"], body["new_string"]))
                files.append({"path": container_path(t), "replacements": n})
        return h.send_json({"ok": True, "files": files})
