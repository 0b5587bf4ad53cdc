"""The user side of bench/queues: Queue put+pop and Map set+get through the SDK.

`python3 app.py client N`: from this process (the SDK's HTTP gateway route).
`python3 app.py container N`: inside a function container (the agent's socket
and its NATS relay), called once with .remote(). Prints one JSON object.
"""

import json
import sys
import time

from berth import Map, Queue, function


def loop(n, tag):
    q = Queue("bench-" + tag)
    m = Map("bench-" + tag)
    q.put(-1)  # the first call opens connections and creates the stream: not measured
    q.pop()
    m["warm"] = 0
    t0 = time.perf_counter()
    for i in range(n):
        q.put(i)
        assert q.pop() == i
    queue_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(n):
        m[str(i)] = i
        assert m[str(i)] == i
    map_s = time.perf_counter() - t0
    return {"ops": n, "queue_put_pop_per_s": n / queue_s, "map_set_get_per_s": n / map_s}


@function(name="bench-queues", cpu=0.5, memory=256, keep_warm_seconds=60, timeout=1200)
def in_container(n):
    return loop(n, "container")


if __name__ == "__main__":
    mode, n = sys.argv[1], int(sys.argv[2])
    out = loop(n, "client") if mode == "client" else in_container.remote(n)
    print(json.dumps(out))
