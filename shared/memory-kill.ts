// What a container the memory cgroup's OOM killer ended says, wherever it is
// reported (a task's error, a sandbox's end): that memory killed it, the limit
// it had, and the parameter that raises it. The decorators, Sandbox and Pod
// all take `memory=`; /dev/shm (where model servers and PyTorch put shared
// tensors) is sized to the same limit and its pages count against it.

/** The limit as the SDK's `memory=` takes it: MiB below a GiB, else GiB. */
function limitText(memoryBytes: number): string {
  const mib = memoryBytes / 2 ** 20;
  return mib < 1024 ? `${Math.round(mib)} MiB` : `${Math.round((mib / 1024) * 10) / 10} GiB`;
}

/** "killed for memory: the limit is 128 MiB; raise memory= ..." (the limit left out when unknown). */
export function memoryKillMessage(memoryBytes: number | undefined): string {
  const limit = memoryBytes ? `the limit is ${limitText(memoryBytes)}` : "it reached its memory limit";
  return (
    `killed for memory: ${limit}; raise memory= (e.g. memory="16Gi"; a model server needs room for its ` +
    "weights, caches and /dev/shm, which is sized to and counts against the same limit)"
  );
}
