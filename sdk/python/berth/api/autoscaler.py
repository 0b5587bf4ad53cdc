"""QueueDepthAutoscaler: how many containers a deployment may run (spec, QueueDepthAutoscaler).

The SDK only validates and carries the numbers: the coordinator derives the
desired container count from the queue depth and clamps it to
``[min_containers, max_containers]``.
"""

from typing import Any, Dict, Optional


def _count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
        isinstance(value, float) and not value.is_integer()
    ):
        raise ValueError(f"QueueDepthAutoscaler {name} must be a whole number >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"QueueDepthAutoscaler {name} must be >= {minimum}, got {value!r}")
    return int(value)


class QueueDepthAutoscaler:
    """Scales containers with the queue depth.

    ``min_containers`` (default 0): baseline containers, kept until the deployment stops.
    ``max_containers`` (default 1): upper limit of containers.
    ``tasks_per_container`` (default 0): max tasks queued to one container; 0 means any number.
    ``max_tasks_per_container``: the spec's name for ``tasks_per_container``; give either one
    (both with different values is an error; a ``tasks_per_container`` of 0 counts as not given).
    """

    def __init__(
        self,
        min_containers: int = 0,
        max_containers: int = 1,
        tasks_per_container: int = 0,
        max_tasks_per_container: Optional[int] = None,
    ):
        self.min_containers = _count("min_containers", min_containers, 0)
        self.max_containers = _count("max_containers", max_containers, 1)
        tasks = _count("tasks_per_container", tasks_per_container, 0)
        if max_tasks_per_container is not None:
            alias = _count("max_tasks_per_container", max_tasks_per_container, 0)
            if tasks not in (0, alias):
                raise ValueError(
                    f"QueueDepthAutoscaler got tasks_per_container={tasks} and max_tasks_per_container={alias}: "
                    "they are the same setting, give one of them"
                )
            tasks = alias
        self.tasks_per_container = tasks
        if self.min_containers > self.max_containers:
            raise ValueError(
                f"QueueDepthAutoscaler min_containers ({self.min_containers}) is above "
                f"max_containers ({self.max_containers})"
            )

    @property
    def max_tasks_per_container(self) -> int:
        return self.tasks_per_container

    def to_config(self) -> Dict[str, Any]:
        """The stub config's ``autoscaler`` (``min_containers`` travels in the stub's extra)."""
        return {
            "type": "queue_depth",
            "max_containers": self.max_containers,
            "tasks_per_container": self.tasks_per_container,
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QueueDepthAutoscaler):
            return NotImplemented
        return (self.min_containers, self.max_containers, self.tasks_per_container) == (
            other.min_containers,
            other.max_containers,
            other.tasks_per_container,
        )

    def __hash__(self) -> int:
        return hash((self.min_containers, self.max_containers, self.tasks_per_container))

    def __repr__(self) -> str:
        return (
            f"QueueDepthAutoscaler(min_containers={self.min_containers}, max_containers={self.max_containers}, "
            f"tasks_per_container={self.tasks_per_container})"
        )
