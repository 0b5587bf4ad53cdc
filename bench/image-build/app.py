"""The user side of bench/image-build: ``python3 app.py MODE ARGS...`` prints one JSON object.

``build``: builds ``Image.from_dockerfile($BENCH_CONTEXT/Dockerfile, $BENCH_CONTEXT)`` on the
cluster, as ``.remote()`` and ``berth deploy`` do, and reports the client's wall time and how
many steps were cached and built.
``cold N IDLE``: N cold ``.remote()`` calls (no container up: each after IDLE seconds, longer than
keep_warm_seconds) of a function on that built image and of one on the default image, interleaved.
"""

import io
import json
import os
import sys
import time

from berth import Image, function
from berth.api.function import default_client
from berth.client import images as image_client
from berth.client.images import build_image

# Inside the function container the module is imported to find the handlers; nothing is built there.
CONTEXT = os.environ.get("BENCH_CONTEXT", "/nonexistent")
BUILT = Image.from_dockerfile(os.path.join(CONTEXT, "Dockerfile"), CONTEXT)


@function(name="bench-image-built", image=BUILT, cpu=0.25, memory=128, keep_warm_seconds=1)
def on_built(x):
    with open("/opt/app/greeting.txt") as f:
        return f"{f.read().strip()} {x}"


@function(name="bench-image-default", cpu=0.25, memory=128, keep_warm_seconds=1)
def on_default(x):
    return f"hello {x}"


def build():
    out = io.StringIO()
    # When the build's last step ended: the rest is the push to the cluster registry and the record.
    steps_done = [0.0]
    follow = image_client.events

    def timed(resp, url):
        for e in follow(resp, url):
            if e.get("event") == "step_done":
                steps_done[0] = time.perf_counter()
            yield e

    image_client.events = timed
    t0 = time.perf_counter()
    record = build_image(default_client(), BUILT, out=out)
    seconds = time.perf_counter() - t0
    text = out.getvalue()
    return {
        "seconds": seconds,
        "steps_seconds": (steps_done[0] - t0) if steps_done[0] else seconds,
        "cached": text.count("… cached"),
        "built": text.count("… built in"),
        "ref": record["ref"],
    }


def cold(n, idle_s):
    # Stubs, code and the (cached) build in place, not measured; their containers then go away.
    assert on_built.remote(-1) == "hello -1"
    assert on_default.remote(-1) == "hello -1"
    samples = {"built": [], "default": []}
    for i in range(n):
        order = (("built", on_built), ("default", on_default))
        for name, fn in order if i % 2 == 0 else tuple(reversed(order)):
            time.sleep(idle_s)
            t0 = time.perf_counter()
            assert fn.remote(i) == f"hello {i}"
            samples[name].append((time.perf_counter() - t0) * 1000.0)
    return {"samples_ms": samples}


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "build":
        print(json.dumps(build()))
    elif mode == "cold":
        print(json.dumps(cold(int(sys.argv[2]), float(sys.argv[3]))))
    else:
        raise SystemExit(f"unknown mode {mode}")
