"""``Bot``: a stateful workflow of typed locations and transitions (spec, "Bot").

A bot holds markers (instances of a data model type, a dataclass for example)
in locations, one location per marker type. A transition takes markers out of
its input locations (``inputs``: marker type -> count), runs its handler
``(context, inputs)`` in a container of its own and puts the markers it
returns (marker type -> list of instances) into its output locations.

Each transition is a :class:`berth.Function` (stub type ``function``) with the
transition's cpu, memory and image: ``triage.remote(context, inputs)`` runs it
as a task in a container, ``triage.local(...)`` here; both check the handler's
answer against the declared outputs. Parameters and defaults: docs/bots.md.
"""

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from ..client.bots import BotSession
from ..client.kinds import BOT
from ..client.markers import marker_from_json, marker_name, marker_to_json
from ..errors import BerthError
from .function import MAX_PENDING_TASKS, Function
from .image import Image
from .options import check_int, check_timeout, cpu_fields, parse_gpu, parse_memory
from .volume import volumes_option

# Spec, Bot: cpu 1.0, memory 128, timeout 180, workers 1, keep_warm_seconds 300, retries 3.
BOT_TIMEOUT_S = 180
BOT_KEEP_WARM_S = 300
# The spec lists `authorized` both ways; berth requires the token (docs/bots.md, design notes).
BOT_AUTHORIZED = True
BOT_TRANSITION_ATTR = "_berth_bot_transition"
# shared/objects.ts MAX_MODEL_CALL_MS plus the relay's own 30 s.
MODEL_CALL_TIMEOUT_S = 330.0


@dataclass(frozen=True)
class BotLocation:
    """A place markers of one type wait in; ``expose=False`` hides it from the session's user."""

    marker: type
    expose: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.marker, type):
            raise TypeError(f"BotLocation marker must be a data model type (a class), not {self.marker!r}")
        if not isinstance(self.expose, bool):
            raise TypeError(f"BotLocation expose must be a bool, not {self.expose!r}")


@dataclass
class BotContext:
    """What a transition handler gets as ``context``: which bot, session and transition it runs for.

    ``chat(messages)`` and ``prompt(text)`` ask the bot's ``model`` through the cluster's ``/v1``
    gateway (inside a container through the agent's socket; outside with the configured token).
    """

    bot_name: Optional[str] = None
    session_id: Optional[str] = None
    transition: Optional[str] = None
    model: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    def chat(self, messages: List[Dict[str, Any]], **options: Any) -> Dict[str, Any]:
        """One chat completion of the bot's model: OpenAI's response object (a dict)."""
        if not self.model:
            raise BerthError("failed_precondition", "the bot has no model: pass Bot(model=...) to prompt one")
        if not isinstance(messages, list) or not messages:
            raise ValueError("chat needs a non-empty list of messages ({'role': ..., 'content': ...})")
        from .state_transport import call

        body = {**options, "model": self.model, "messages": messages, "stream": False}
        if self.session_id:
            body.setdefault("user", self.session_id)
        # A model scaled to zero starts first: the agent waits up to 300 s for the answer (docs/bots.md).
        return call({"op": "model.chat", "body": body}, timeout=MODEL_CALL_TIMEOUT_S).get("response") or {}

    def prompt(self, text: str, **options: Any) -> str:
        """The model's answer to one user message, as text."""
        answer = self.chat([{"role": "user", "content": str(text)}], **options)
        choices = answer.get("choices") or [{}]
        return str(((choices[0] or {}).get("message") or {}).get("content") or "")


class BotTransition(Function):
    """One ``@bot.transition``: a function stub whose handler moves markers between locations."""

    def __init__(
        self,
        bot: "Bot",
        func: Callable,
        inputs: Mapping[type, int],
        outputs: Sequence[type],
        description: Optional[str],
        cpu: Union[int, float, str, None],
        memory: Union[int, str, None],
        image: Optional[Image],
    ):
        # A transition inherits what the spec does not list for it (gpu, timeout, retries, secrets,
        # volumes) from its bot; cpu, memory and image fall back to the bot's.
        super().__init__(
            func,
            cpu=bot.cpu_option if cpu is None else cpu,
            memory=bot.memory if memory is None else memory,
            gpu=bot.gpu_option,
            image=bot.image if image is None else image,
            timeout=bot.timeout,
            retries=bot.retries,
            volumes=bot.volumes,
            secrets=bot.secrets,
            name=f"{bot.name}.{func.__name__}" if bot.name else None,
            keep_warm_seconds=bot.keep_warm_seconds,
        )
        self.bot = bot
        # The runner finds the transition of the handler it imported by this (a JSON task is a firing).
        setattr(func, BOT_TRANSITION_ATTR, self)
        self.inputs = bot._check_inputs(func.__name__, inputs)
        self.outputs = bot._check_outputs(func.__name__, outputs)
        if description is not None and not isinstance(description, str):
            raise TypeError(f"transition {func.__name__}: description must be a string, not {description!r}")
        self.description = description if description is not None else (func.__doc__ or "").strip() or None

    def __repr__(self) -> str:
        return f"<berth.BotTransition {self.stub_name}>"

    def check_inputs(self, inputs: Mapping[type, List[Any]]) -> None:
        """Raises unless ``inputs`` holds exactly the declared count of markers of each input type."""
        if not isinstance(inputs, Mapping):
            raise TypeError(f"transition {self.func.__name__}: inputs must be a mapping of marker type to list")
        if set(inputs) != set(self.inputs):
            raise ValueError(
                f"transition {self.func.__name__} takes {_names(self.inputs)}, was given {_names(inputs)}"
            )
        for marker, count in self.inputs.items():
            got = inputs[marker]
            if not isinstance(got, list) or len(got) != count or not all(isinstance(m, marker) for m in got):
                raise ValueError(
                    f"transition {self.func.__name__} takes {count} {marker_name(marker)} marker(s), was given {got!r}"
                )

    def check_result(self, result: Any) -> Dict[type, List[Any]]:
        """The handler's answer, checked: a mapping of declared output types to lists of their instances."""
        name = self.func.__name__
        if not isinstance(result, Mapping):
            raise BerthError(
                "invalid_request",
                f"transition {name} returned {type(result).__name__}: it must return a mapping of marker type to list",
            )
        checked: Dict[type, List[Any]] = {}
        for marker, items in result.items():
            if marker not in self.outputs:
                raise BerthError(
                    "invalid_request",
                    f"transition {name} returned {_label(marker)} markers, which are not among its outputs "
                    f"{_names(self.outputs)}",
                )
            if not isinstance(items, (list, tuple)) or not all(isinstance(m, marker) for m in items):
                raise BerthError(
                    "invalid_request",
                    f"transition {name} returned {items!r} for {marker_name(marker)}: a list of {marker_name(marker)}",
                )
            checked[marker] = list(items)
        return checked

    def local(self, context: Any, inputs: Mapping[type, List[Any]]) -> Dict[type, List[Any]]:
        """Runs the handler here; the inputs and the answer are checked as for ``.remote()``."""
        self.check_inputs(inputs)
        return self.check_result(self.func(context, dict(inputs)))

    def remote(self, context: Any, inputs: Mapping[type, List[Any]]) -> Dict[type, List[Any]]:
        """Runs the handler once as a task in a container of the transition's stub."""
        self.check_inputs(inputs)
        return self.check_result(super().remote(context, dict(inputs)))

    def run_session_task(self, context: Any, session: Dict[str, Any], inputs: Dict[str, List[Any]]) -> Dict[str, Any]:
        """What the runner calls for a firing of a deployed bot (a JSON task the coordinator sent).

        ``session``: which bot, session and firing; ``inputs``: marker type name -> JSON documents.
        Answers marker type name -> JSON documents of the markers the handler returned.
        """
        if not isinstance(session, dict) or not isinstance(inputs, dict):
            raise BerthError("invalid_request", f"transition {self.func.__name__}: session and inputs must be objects")
        ctx = BotContext(
            bot_name=session.get("bot"),
            session_id=session.get("id"),
            transition=self.func.__name__,
            model=session.get("model"),
            extra={
                "firing": session.get("firing"),
                "task_id": getattr(context, "task_id", None),
                "container_id": getattr(context, "container_id", None),
            },
        )
        markers = {
            m: [marker_from_json(m, d) for d in (inputs.get(marker_name(m)) or [])] for m in self.inputs
        }
        result = self.local(ctx, markers)
        return {marker_name(m): [marker_to_json(x) for x in items] for m, items in result.items()}


class Bot:
    """Spec "Bot": its locations, its transitions (``@bot.transition``) and the options its containers get."""

    # What `berth deploy FILE.py:bot` tells it by (berth.client.kinds).
    _berth_kind = BOT

    def __init__(
        self,
        model: Optional[str] = None,
        api_key: Optional[str] = None,
        locations: Optional[List[BotLocation]] = None,
        description: Optional[str] = None,
        authorized: bool = BOT_AUTHORIZED,
        cpu: Union[int, float, str] = 1.0,
        memory: Union[int, str] = 128,
        gpu: Union[str, Sequence[str], None] = None,
        image: Optional[Image] = None,
        timeout: int = BOT_TIMEOUT_S,
        workers: int = 1,
        keep_warm_seconds: int = BOT_KEEP_WARM_S,
        max_pending_tasks: int = MAX_PENDING_TASKS,
        on_start: Optional[Callable] = None,
        volumes: Optional[List[Any]] = None,
        secrets: Optional[List[str]] = None,
        name: Optional[str] = None,
        retries: int = 3,
    ):
        for label, value in (("model", model), ("api_key", api_key), ("description", description), ("name", name)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"Bot {label} must be a string, not {type(value).__name__}")
        if not isinstance(authorized, bool):
            raise TypeError(f"Bot authorized must be a bool, not {authorized!r}")
        self.model, self.api_key, self.description, self.name = model, api_key, description, name
        self.authorized = authorized
        self.locations = list(locations or [])
        seen: Dict[str, type] = {}
        for loc in self.locations:
            if not isinstance(loc, BotLocation):
                raise TypeError(f"Bot locations must be BotLocation objects, not {loc!r}")
            if marker_name(loc.marker) in seen:
                raise ValueError(f"Bot has two locations for the marker type {marker_name(loc.marker)}")
            seen[marker_name(loc.marker)] = loc.marker
        self.cpu_option = cpu
        self.cpu, self.cpu_millicores = cpu_fields(cpu)
        self.memory = parse_memory(memory)
        self.gpu_option = gpu
        parse_gpu(gpu, 0)
        if image is not None and not isinstance(image, Image):
            raise TypeError(f"Bot image must be a berth.Image, not {type(image).__name__}")
        self.image = image if image is not None else Image()
        self.timeout = check_timeout(timeout)
        self.workers = check_int("workers", workers, 1)
        self.keep_warm_seconds = check_int("keep_warm_seconds", keep_warm_seconds, -1)
        self.max_pending_tasks = check_int("max_pending_tasks", max_pending_tasks, 1)
        if on_start is not None and not callable(on_start):
            raise TypeError("Bot on_start must be a function")
        self.on_start = on_start
        self.volumes = volumes_option(volumes)
        self.secrets = [str(s) for s in (secrets or [])]
        self.retries = check_int("retries", retries, 0)
        self.transitions: Dict[str, BotTransition] = {}

    def __repr__(self) -> str:
        return f"<berth.Bot {self.name or '(unnamed)'}: {len(self.locations)} locations, {len(self.transitions)} transitions>"

    def location(self, marker: type) -> Optional[BotLocation]:
        return next((loc for loc in self.locations if loc.marker is marker), None)

    def session(self, client: Any = None) -> Any:
        """A new session of this bot as deployed (``berth deploy``) under its name: a BotSession."""
        if not self.name:
            raise BerthError("invalid_request", "an unnamed Bot is deployed under its variable's name: use BotSession.open(name)")
        return BotSession.open(self.name, client)

    def deployment(self, attr: str, name: Optional[str], code_sha256: str) -> Dict[str, Any]:
        """What ``berth deploy FILE.py:bot`` registers: the bot's stub and each transition's (docs/bots.md).

        ``extra.bot`` holds the definition; each transition carries its own function stub (name, type,
        config, extra), which the CLI creates and replaces by its ``stub_id``.
        """
        if not self.transitions:
            raise BerthError("invalid_request", f"the bot {attr} has no transitions: add one with @bot.transition")
        if self.api_key is not None:
            # A key in the stub would be stored and shown with it (docs/bots.md, "Models").
            raise BerthError(
                "invalid_request",
                "Bot(api_key=...) is not deployable: the key would be stored in the deployment's configuration; "
                "deploy the model on the cluster (served_models=) and name it in Bot(model=...)",
            )
        first = next(iter(self.transitions.values()))
        loc = first.location()
        module = loc.handler.partition(":")[0]
        config = first.stub_config(loc)
        config.update(
            handler=f"{module}:{attr}",
            runtime={**config["runtime"], "cpu": self.cpu, "memory": self.memory},
            authorized=self.authorized,
            workers=self.workers,
            keep_warm_seconds=self.keep_warm_seconds,
            max_pending_tasks=self.max_pending_tasks,
        )
        extra = first.stub_extra(code_sha256)
        deploy_name = name or self.name or attr
        transitions = []
        for t_name, t in self.transitions.items():
            t_loc = t.location()
            t_config = t.stub_config(t_loc)
            t_config["max_pending_tasks"] = self.max_pending_tasks
            t_config["workers"] = self.workers
            transitions.append(
                {
                    "name": t_name,
                    "inputs": {marker_name(m): c for m, c in t.inputs.items()},
                    "outputs": [marker_name(m) for m in t.outputs],
                    "description": t.description,
                    "stub": {"name": f"{deploy_name}.{t_name}", "type": "function", "config": t_config, "extra": t.stub_extra(code_sha256)},
                }
            )
        extra["bot"] = {
            "model": self.model,
            "description": self.description,
            "locations": [{"marker": marker_name(loc.marker), "expose": loc.expose} for loc in self.locations],
            "transitions": transitions,
        }
        return {"root": loc.root, "config": config, "extra": extra, "name": deploy_name}

    def transition(
        self,
        inputs: Optional[Mapping[type, int]] = None,
        outputs: Optional[Sequence[type]] = None,
        description: Optional[str] = None,
        cpu: Union[int, float, str, None] = None,
        memory: Union[int, str, None] = None,
        image: Optional[Image] = None,
    ) -> Callable[[Callable], BotTransition]:
        """``@bot.transition(inputs={Question: 1}, outputs=[Answer])`` over a ``(context, inputs)`` handler."""

        def register(func: Callable) -> BotTransition:
            if not callable(func):
                raise TypeError(f"@bot.transition decorates a function, not {func!r}")
            if func.__name__ in self.transitions:
                raise ValueError(f"the bot already has a transition named {func.__name__}")
            t = BotTransition(self, func, inputs or {}, outputs or [], description, cpu, memory, image)
            self.transitions[func.__name__] = t
            return t

        return register

    def _check_inputs(self, name: str, inputs: Any) -> Dict[type, int]:
        if not isinstance(inputs, Mapping) or not inputs:
            raise ValueError(f"transition {name}: inputs must be a non-empty mapping of marker type to count")
        checked: Dict[type, int] = {}
        for marker, count in inputs.items():
            self._check_marker(name, "input", marker)
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ValueError(f"transition {name}: the count of {marker_name(marker)} must be an int >= 1, got {count!r}")
            checked[marker] = count
        return checked

    def _check_outputs(self, name: str, outputs: Any) -> List[type]:
        if isinstance(outputs, (str, bytes)) or not isinstance(outputs, (list, tuple)):
            raise ValueError(f"transition {name}: outputs must be a list of marker types, not {outputs!r}")
        for marker in outputs:
            self._check_marker(name, "output", marker)
        if len(set(outputs)) != len(outputs):
            raise ValueError(f"transition {name} names an output twice: {_names(outputs)}")
        return list(outputs)

    def _check_marker(self, name: str, role: str, marker: Any) -> None:
        if not isinstance(marker, type):
            raise TypeError(f"transition {name}: {role} {marker!r} is not a marker type (a class)")
        if self.location(marker) is None:
            raise ValueError(
                f"transition {name}: {role} {marker_name(marker)} has no location in the bot "
                f"(add BotLocation(marker={marker_name(marker)}))"
            )


def _label(marker: Any) -> str:
    return marker_name(marker) if isinstance(marker, type) else repr(marker)


def _names(markers: Any) -> str:
    return "[" + ", ".join(sorted(_label(m) for m in markers)) + "]"
