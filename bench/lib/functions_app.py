"""The user side of bench/function-latency and bench/map-throughput.

Run as `python3 functions_app.py MODE ARGS...` from a directory the SDK syncs;
prints one JSON object. Modes measure berth (`warm`, `cold`, `map`) or the
local reference, a multiprocessing.Pool doing the same work (`pool-warm`,
`pool-cold`, `pool-map`).
"""

import json
import multiprocessing
import sys
import time

from berth import function


def work(x):
    return x


@function(name="bench-echo", cpu=0.25, memory=128, keep_warm_seconds=300)
def echo(x):
    return work(x)


@function(name="bench-echo-cold", cpu=0.25, memory=128, keep_warm_seconds=1)
def echo_cold(x):
    return work(x)


def ms_since(t0):
    return (time.perf_counter() - t0) * 1000.0


def warm(n):
    echo.remote(-1)  # starts the container and syncs the code: not measured
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        assert echo.remote(i) == i
        samples.append(ms_since(t0))
    return {"samples_ms": samples}


def cold(n, idle_s):
    echo_cold.remote(-1)  # stub and code in place; its container then goes away
    samples = []
    for i in range(n):
        time.sleep(idle_s)  # longer than keep_warm_seconds + the manager's tick
        t0 = time.perf_counter()
        assert echo_cold.remote(i) == i
        samples.append(ms_since(t0))
    return {"samples_ms": samples}


def map_run(n, fn=None):
    fn = fn or echo
    # Warm: enough tasks that the stub scales to its steady number of containers (8 at cpu=0.25)
    # and the processes on the path are warmed up
    # before the measured run; a cold start is bench/function-latency's business.
    list(fn.map(range(2000)))
    t0 = time.perf_counter()
    out = list(fn.map(range(n)))
    elapsed = ms_since(t0)
    assert out == list(range(n))
    return {"items": n, "elapsed_ms": elapsed, "tasks_per_s": n / (elapsed / 1000.0)}


def pool_warm(n):
    with multiprocessing.Pool(2) as pool:
        pool.apply(work, (-1,))
        samples = []
        for i in range(n):
            t0 = time.perf_counter()
            assert pool.apply(work, (i,)) == i
            samples.append(ms_since(t0))
    return {"samples_ms": samples}


def pool_cold(n):
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        with multiprocessing.Pool(1) as pool:
            assert pool.apply(work, (i,)) == i
        samples.append(ms_since(t0))
    return {"samples_ms": samples}


def pool_map(n):
    with multiprocessing.Pool(2) as pool:
        t0 = time.perf_counter()
        out = pool.map(work, range(n))
        elapsed = ms_since(t0)
    assert out == list(range(n))
    return {"items": n, "elapsed_ms": elapsed, "tasks_per_s": n / (elapsed / 1000.0)}


if __name__ == "__main__":
    mode, args = sys.argv[1], [int(a) for a in sys.argv[2:]]
    result = {
        "warm": lambda: warm(*args),
        "cold": lambda: cold(*args),
        "map": lambda: map_run(*args),
        "pool-warm": lambda: pool_warm(*args),
        "pool-cold": lambda: pool_cold(*args),
        "pool-map": lambda: pool_map(*args),
    }[mode]()
    print(json.dumps(result))
