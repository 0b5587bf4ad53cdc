"""Building an Image on the cluster: ``POST /api/v1/image/{ws}/build`` and its progress.

The coordinator streams NDJSON events; each step is printed as it starts
(``step 2/3 apt-get install -y ffmpeg``), its output as it runs, and its end
with a cached/built mark and its time. A failed step raises ImageBuildError
naming the step, its exit code and its last output lines.
"""

import os
import sys
import time
from typing import IO, Any, Dict, Optional
from urllib.parse import quote

from ..errors import BerthError, ImageBuildError
from .invoke import events


def _workspace(client) -> str:
    ws = getattr(client, "_berth_workspace", None)
    if not ws:
        ws = client.current_workspace().get("external_id", "")
        client._berth_workspace = ws
    return ws


# A build whose stream broke (its coordinator died) is asked for again: behind a load balancer another
# coordinator answers, and the steps done so far are in the agents' step cache. For a while the dead
# build's room on its agent may not be free yet (the agent is tearing it down): "no room" is then
# asked again too, within the window (docs/reliability.md, "Several coordinators").
REBUILD_WINDOW_S = 60.0
REBUILD_PAUSE_S = 2.0


def build_image(client, image, out: Optional[IO[str]] = None) -> Dict[str, Any]:
    """Builds ``image`` (once: the cluster caches every step) and returns its record, with ``ref``."""
    out = out or sys.stdout
    broke_at: Optional[float] = None
    while True:
        try:
            record = _build_once(client, image, out)
        except BerthError as e:
            again = e.code == "unavailable" or (broke_at is not None and e.code == "resource_exhausted")
            if not again or (broke_at is not None and time.monotonic() - broke_at > REBUILD_WINDOW_S):
                raise ImageBuildError(f"building the image failed: {e.message}") from None
            if broke_at is None:
                broke_at = time.monotonic()
                out.write(f"the build's connection broke ({e.message}); asking {client.url} again\n")
            else:
                out.write(f"the build cannot start yet ({e.message}); asking again\n")
                time.sleep(REBUILD_PAUSE_S)
            out.flush()
            continue
        if not record.get("ref"):
            raise ImageBuildError("the coordinator ended the image build without naming the built image")
        return record


def _build_once(client, image, out: IO[str]) -> Dict[str, Any]:
    """One build request and its progress; BerthError when it fails or its stream breaks."""
    path = f"/api/v1/image/{quote(_workspace(client), safe='')}/build"
    conn = client.new_connection(None)
    record: Optional[Dict[str, Any]] = None
    names: Dict[int, str] = {}
    push = PushProgress(out)
    pull = PullProgress(out)
    try:
        body: Dict[str, Any] = {"image": image.spec()}
        creds = image.credential_values()
        if creds:
            # Values only in this request (TLS to the coordinator, then mTLS to the agent); never printed.
            body["base_image_creds"] = creds
        if image.dockerfile:
            body["dockerfile"] = _dockerfile(client, image.dockerfile)
        resp = client.stream(conn, path, body)
        for ev in events(resp, client.url):
            kind = ev.get("event")
            if kind == "step":
                names[ev["step"]] = ev.get("name", "")
                if not ev.get("cached"):
                    out.write(f"step {ev['step']}/{ev['total']} {ev.get('name', '')}\n")
            elif kind == "output":
                out.write(f"  {ev.get('line', '')}\n")
            elif kind == "step_done":
                n = ev["step"]
                mark = "cached" if ev.get("cached") else f"built in {ev.get('seconds', 0):.1f} s"
                out.write(f"step {n} {names.get(n, '')} … {mark}\n")
            elif kind == "push":
                push.update(ev)
            elif kind == "pull":
                pull.update(ev)
            elif kind == "image":
                record = dict(ev.get("image") or {})
                record["env"] = ev.get("env") or {}
            out.flush()
    finally:
        conn.close()
    if record is None:
        # A build that fails says so (an error event); an answer that just stops was cut off: http.client
        # reads a chunked answer cut between two chunks as its end.
        raise BerthError("unavailable", f"the build's answer from {client.url} stopped before naming the built image")
    return record


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"


class PushProgress:
    """The push of a built image to the cluster registry: a bar on a terminal, plain lines off one.

    Off a terminal it prints one line per finished layer (blob), so logs stay short.
    """

    WIDTH = 30
    VERB, DONE, HAD = "push", "pushed", "were already there"

    def __init__(self, out: IO[str]):
        self.out = out
        self.tty = bool(getattr(out, "isatty", lambda: False)())
        self.blobs_seen = -1
        self.done = False

    def update(self, ev: Dict[str, Any]) -> None:
        if self.done:
            return
        ref, total = ev.get("ref", ""), int(ev.get("bytes_total") or 0)
        done_bytes, blobs, blobs_total = int(ev.get("bytes_done") or 0), ev.get("blobs_done", 0), ev.get("blobs_total", 0)
        finished = blobs_total and blobs >= blobs_total
        if self.tty:
            frac = done_bytes / total if total else 1.0
            bar = "#" * int(frac * self.WIDTH)
            self.out.write(
                f"\r{self.VERB} {ref} [{bar:<{self.WIDTH}}] {frac * 100:3.0f}% {_mib(done_bytes)}/{_mib(total)}"
                f" ({blobs}/{blobs_total} layers)"
            )
            if finished:
                self.out.write("\n")
        elif blobs != self.blobs_seen:
            if self.blobs_seen < 0:
                self.out.write(f"{self.VERB} {ref}: {blobs_total} layers, {_mib(total)}\n")
            else:
                self.out.write(f"{self.VERB} {ref}: {blobs}/{blobs_total} layers, {_mib(done_bytes)}/{_mib(total)}\n")
        self.blobs_seen = blobs
        if finished:
            skipped = ev.get("blobs_skipped", 0)
            self.out.write(f"{self.DONE} {ref} ({skipped} of {blobs_total} layers {self.HAD})\n")
            self.done = True


class PullProgress(PushProgress):
    """The pull of the build's base image onto the building host: the same bar and lines as a push."""

    VERB, DONE, HAD = "pull", "pulled", "were cached"


def _dockerfile(client, dockerfile: Dict[str, str]) -> Dict[str, str]:
    """The Dockerfile's text, and its context directory uploaded like code (content addressed, once)."""
    from .sync import sync_code

    try:
        with open(dockerfile["path"], "r", encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ImageBuildError(f"cannot read the Dockerfile {dockerfile['path']}: {e.strerror or e}") from None
    if not os.path.isdir(dockerfile["context_dir"]):
        raise ImageBuildError(f"the Dockerfile's context_dir {dockerfile['context_dir']} is not a directory")
    return {"text": text, "context_sha256": sync_code(client, dockerfile["context_dir"])}
