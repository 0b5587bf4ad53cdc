"""Decorator options as the stub config wants them: memory, GPUs, task policy, exception names."""

import datetime
import math
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any, List, Optional, Sequence, Tuple, Union

# MiB per unit. Binary units are exact; "G" is taken as 1000 MiB and "T" as 1000 G, like other serverless SDKs.
_UNITS = {"": 1, "m": 1, "mi": 1, "g": 1000, "gi": 1024, "t": 1000 * 1000, "ti": 1024 * 1024}
_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]{0,2}?)b?\s*$", re.IGNORECASE)


def parse_memory(memory: Union[int, str]) -> int:
    """MiB from an int (MiB) or a string such as "512Mi", "2Gi", "1G", "512M", "256"."""
    if isinstance(memory, bool):
        raise ValueError(f"memory must be MiB or a string with a unit such as '512Mi' or '2Gi', not {memory!r}")
    if isinstance(memory, int):
        mib = memory
    elif isinstance(memory, float) and memory.is_integer():
        mib = int(memory)
    elif isinstance(memory, str):
        m = _MEMORY.match(memory)
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _UNITS:
            raise ValueError(
                f"memory {memory!r} is not understood: give MiB as an int or a string such as "
                "'512Mi', '2Gi', '1G', '512M' or '256'"
            )
        value = float(m.group(1)) * _UNITS[unit]
        if not value.is_integer():
            raise ValueError(f"memory {memory!r} is not a whole number of MiB")
        mib = int(value)
    else:
        raise ValueError(f"memory must be MiB (int) or a string such as '512Mi', not {type(memory).__name__}")
    if mib <= 0:
        raise ValueError(f"memory must be positive, got {memory!r}")
    return mib


# A MIG slice: the GPU type, a colon and the MIG profile, e.g. "A100:1g.10gb" or "H200:1g.18gb+me".
_MIG_SLICE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*:\d+g\.\d+gb(\+[a-z0-9]+)*$", re.IGNORECASE)


def parse_gpu(gpu: Union[str, Sequence[str], None], gpu_count: int) -> Tuple[List[str], int]:
    """GPU types in priority order and the count (1 when a GPU is named without a count).

    A type may name a MIG slice by profile ("A100:1g.10gb"); a container gets one slice.
    """
    if gpu is None or gpu == "":
        types: List[str] = []
    elif isinstance(gpu, str):
        types = [t.strip() for t in gpu.split(",") if t.strip()]
    elif isinstance(gpu, (list, tuple)):
        types = []
        for t in gpu:
            if not isinstance(t, str) or not t.strip():
                raise ValueError(f"gpu must be a GPU type or a list of GPU types, got {gpu!r}")
            types.append(t.strip())
    else:
        raise ValueError(f"gpu must be a GPU type such as 'A10G' or a priority list, not {type(gpu).__name__}")
    if isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or gpu_count < 0:
        raise ValueError(f"gpu_count must be a non-negative int, got {gpu_count!r}")
    if types and gpu_count == 0:
        gpu_count = 1
    # beta9's GpuType.Any: one GPU of whatever type an agent has (the scheduler's empty type list).
    if types and all(t.lower() == "any" for t in types):
        return [], gpu_count
    if not types and gpu_count > 0:
        raise ValueError("gpu_count is set but no gpu type is named: pass gpu='A10G' (or a list) as well")
    for t in types:
        if ":" in t and not _MIG_SLICE.match(t):
            raise ValueError(f"gpu {t!r} is not a MIG slice: write the type and a MIG profile, e.g. 'A100:1g.10gb'")
        if ":" in t and gpu_count > 1:
            raise ValueError(f"a MIG slice ({t}) is given one per container; gpu_count must be 1, got {gpu_count}")
    return types, gpu_count


def parse_gpu_memory(gpu_memory: Union[int, str, None], types: List[str], gpu_count: int) -> Tuple[int, Optional[int]]:
    """``gpu_memory=``: part of one shared GPU, in MiB (like ``memory``); returns the GPU count and the MiB.

    Without a ``gpu`` it takes a share of any shared GPU; with one, of a shared GPU of those types.
    """
    if gpu_memory is None:
        return gpu_count, None
    try:
        mib = parse_memory(gpu_memory)
    except ValueError as e:
        raise ValueError(str(e).replace("memory", "gpu_memory", 1)) from None
    if gpu_count > 1:
        raise ValueError(f"gpu_memory asks for part of one shared GPU; gpu_count must be 1, got {gpu_count}")
    for t in types:
        if ":" in t:
            raise ValueError(f"gpu_memory shares a whole GPU; a MIG slice ({t}) cannot be shared")
    return 1, mib


class GpuType(str, Enum):
    """beta9's GPU type names: ``gpu=GpuType.A10G`` is ``gpu="A10G"``; ``Any`` takes one GPU of any type.

    Any type an agent reports may be named as a plain string too (docs/gpus.md).
    """

    NoGPU = ""
    Any = "any"
    T4 = "T4"
    L4 = "L4"
    A10G = "A10G"
    A100_40 = "A100-40"
    A100_80 = "A100-80"
    H100 = "H100"
    A6000 = "A6000"
    RTX4090 = "RTX4090"

    def __str__(self) -> str:
        return self.value


@dataclass
class TaskPolicy:
    """Per-task lifecycle; overrides the decorator's ``timeout`` and ``retries``.

    ``expires``: seconds a task may wait in the queue before it is EXPIRED, or
    a datetime after which a task not yet started expires.
    """

    max_retries: int = 3
    timeout: int = 3600
    expires: Union[int, float, datetime.datetime, None] = None


def expires_text(expires: Any) -> str:
    """``task_policy.expires``: "" (never), an ISO timestamp, or seconds counted from each task's creation."""
    if expires is None or expires == 0:
        return ""
    if isinstance(expires, datetime.datetime):
        when = expires if expires.tzinfo else expires.astimezone()
        return when.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
    if isinstance(expires, bool) or not isinstance(expires, (int, float)) or expires < 0:
        raise ValueError(f"task_policy.expires must be seconds or a datetime, got {expires!r}")
    return str(int(expires)) if float(expires).is_integer() else str(expires)


ISOLATIONS = ("container", "gvisor")


def check_isolation(value: Any) -> str:
    """``isolation=``: "container" (the agent's OCI runtime, runc or crun) or "gvisor" (runsc)."""
    if value not in ISOLATIONS:
        raise ValueError(f"isolation must be one of {', '.join(repr(i) for i in ISOLATIONS)}, got {value!r}")
    return value


_POOL = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def check_pool(value: Any) -> Optional[str]:
    """``pool=``: only agents of that pool (``berth agent --pool``) run it; None: any agent."""
    if value is None:
        return None
    if not isinstance(value, str) or not _POOL.match(value):
        raise ValueError(f"pool must be a pool name (1-63 characters: a-z, 0-9, '_' and '-'), got {value!r}")
    return value


MAX_PRIORITY = 1000


def check_priority(value: Any) -> int:
    """``priority=``: higher is placed first and may preempt lower ``preemptible`` work; 0 by default."""
    if isinstance(value, bool) or not isinstance(value, int) or not -MAX_PRIORITY <= value <= MAX_PRIORITY:
        raise ValueError(f"priority must be an int from {-MAX_PRIORITY} to {MAX_PRIORITY}, got {value!r}")
    return value


def check_preemptible(value: Any) -> bool:
    """``preemptible=``: its running containers may be stopped for higher-priority work (tasks requeued)."""
    if not isinstance(value, bool):
        raise TypeError(f"preemptible must be True or False, not {value!r}")
    return value


# shared/gang.ts MAX_GANG_NODES: the most hosts one gang spans.
MAX_GANG_NODES = 64


def check_nodes(value: Any) -> int:
    """``nodes=``: how many hosts each container is a gang of (1: no gang); see Function."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_GANG_NODES:
        raise ValueError(
            f"nodes must be an int from 1 to {MAX_GANG_NODES} (the hosts that run each task together), got {value!r}"
        )
    return value


def check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def check_timeout(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or (value <= 0 and value != -1):
        raise ValueError(f"timeout must be a positive number of seconds or -1 (none), got {value!r}")
    return value


_CPU = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(m?)\s*$")


def cpu_fields(cpu: Any) -> Tuple[int, int]:
    """(runtime.cpu, cpu_millicores) from cores (1, 0.5), a string of cores ("1.5") or millicores ("500m").

    The spec's ``runtime.cpu`` is an integer, so it rounds up; the millicores are exact.
    """
    if isinstance(cpu, str):
        m = _CPU.match(cpu)
        if m is None:
            raise ValueError(f"cpu {cpu!r} is not understood: give cores (1, 0.5, '1.5') or millicores such as '500m'")
        value = float(m.group(1))
        if m.group(2) and not value.is_integer():
            raise ValueError(f"cpu {cpu!r} is not a whole number of millicores")
        millicores = value if m.group(2) else value * 1000
    elif isinstance(cpu, bool) or not isinstance(cpu, (int, float)) or not math.isfinite(cpu):
        raise ValueError(f"cpu must be a number of cores or a string such as '500m', not {cpu!r}")
    else:
        millicores = cpu * 1000
    whole = int(round(millicores))
    if whole < 1:
        raise ValueError(f"cpu must be at least one millicore ('1m'), got {cpu!r}")
    return int(math.ceil(whole / 1000)), whole


def exception_name(e: Any) -> str:
    """``Name`` for builtins, ``module.Qualname`` otherwise; strings pass as given."""
    if isinstance(e, str):
        if not e.strip():
            raise ValueError("retry_for holds an empty exception name")
        return e.strip()
    if isinstance(e, type) and issubclass(e, BaseException):
        return e.__qualname__ if e.__module__ == "builtins" else f"{e.__module__}.{e.__qualname__}"
    raise ValueError(f"retry_for takes exception classes or their names, not {e!r}")


def retry_names(retry_for: Optional[Sequence[Any]]) -> List[str]:
    if retry_for is None:
        return []
    if isinstance(retry_for, (str, type)):
        retry_for = [retry_for]
    names = []
    for e in retry_for:
        name = exception_name(e)
        if name.startswith("__main__."):
            # The container imports the script under its file's name: the bare name matches there.
            name = name[len("__main__.") :]
        names.append(name)
    return names
