"""The user side of bench/volumes: read a file from a Volume inside a function container.

`python3 app.py container PATH_IN_VOLUME`: reads /volumes/bench/PATH in 8 MiB
blocks inside a container and prints {bytes, seconds} as JSON.
`python3 app.py host FILE`: the same loop on this host, for the reference.
"""

import json
import sys
import time

from berth import Volume, function

bench = Volume(name="bench", mount_path="./bench")
BLOCK = 8 * 1024 * 1024


def read_all(path):
    n = 0
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(BLOCK)
            if not b:
                break
            n += len(b)
    return {"bytes": n, "seconds": time.perf_counter() - t0}


@function(name="bench-volumes", volumes=[bench], cpu=1, memory=256, keep_warm_seconds=120, timeout=600)
def read_in_container(rel):
    return read_all("/volumes/bench/" + rel)


if __name__ == "__main__":
    mode, arg = sys.argv[1], sys.argv[2]
    print(json.dumps(read_in_container.remote(arg) if mode == "container" else read_all(arg)))
