"""The assignment as the box program takes it: JSON checked whole, then frozen dataclasses.

Whatever llmao's config loads, the box must accept, or a config llmao serves would
strand a box at boot: so the rules themselves are the core's ``payload_rules``
(built into this program), and this module only walks the JSON, says where a fault
is, and refuses the assignment whole. A refusal is exit 2 and nothing is written.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ansible_collections.llmao.fleet.plugins.module_utils.box_protocol import MAX_LEAF_DAYS
from ansible_collections.llmao.fleet.plugins.module_utils.payload_rules import (
    API_KEY_RE,
    BOX_NAME_RE,
    INTEGER_NUMBERS,
    MAX_ARG,
    MAX_ARGS,
    MAX_SERVERS,
    MAX_TEXT,
    NUMBER_LIMITS,
    ROLLOUT_LIMITS,
    SERVER_NAME_RE,
    args_problem,
    clashes_with_follow_program,
    parallel_problem,
    parallel_sizes,
    revision_problem,
    text_problem,
)

from .box_files import FOLLOW_FILE
from .errors import Refused

OPTIONAL_NUMBERS = tuple(NUMBER_LIMITS)

CA_SHA256_RE = re.compile(r"[0-9a-f]{64}\Z")


@dataclass(frozen=True)
class Server:
    """One vLLM process of the assignment, checked."""

    name: str
    model: str
    served_model_name: str
    port: int
    api_key: str = field(repr=False)
    args: tuple[str, ...] = ()
    gpu_memory_utilization: Decimal | None = None
    max_model_len: int | None = None
    vram_gb: Decimal | None = None
    disk_gb: Decimal | None = None
    # The cards this server spans; ``args`` may set the parallel sizes (then their product
    # is ``gpus``), else the program passes --tensor-parallel-size when it is above 1.
    gpus: int = 1
    sets_parallel: bool = False


@dataclass(frozen=True)
class Assignment:
    host: str
    revision: str | None
    servers: tuple[Server, ...]
    # Present when llmao's config sets rollout.follow_s: the box follows.
    rollout: Rollout | None = None
    # Present when llmao's config has box_tls: vLLM serves HTTPS with a certificate of llmao's.
    tls: BoxTls | None = None


@dataclass(frozen=True)
class Rollout:
    """The payload's ``rollout``: how often the box checks, and llmao's drain time."""

    follow_s: float
    drain_s: float


@dataclass(frozen=True)
class BoxTls:
    """The payload's ``tls``: the fleet CA's fingerprint and how many days a leaf lives."""

    ca_sha256: str
    leaf_days: int


def validate_assignment(doc: Any) -> Assignment:
    """Check the JSON shape of an assignment; refuse it whole with the path of the fault."""
    if not isinstance(doc, dict):
        raise Refused("assignment: must be a JSON object with host and servers")
    host = box_name_field(doc, "host", "assignment")
    revision = doc.get("revision")
    if revision is not None and revision_problem(revision):
        raise Refused(f"assignment.revision: {revision_problem(revision)}")
    entries = doc.get("servers")
    if not isinstance(entries, list):
        raise Refused("assignment.servers: must be a list")
    if len(entries) > MAX_SERVERS:
        raise Refused(f"assignment.servers: a box runs at most {MAX_SERVERS} servers, "
                      f"this assignment has {len(entries)}")
    servers = tuple(validate_server(entry, f"servers[{i}]") for i, entry in enumerate(entries))
    for key in ("name", "port"):
        seen: set[Any] = set()
        for i, server in enumerate(servers):
            value = getattr(server, key)
            if value in seen:
                raise Refused(f"servers[{i}].{key}: {value!r} appears twice")
            seen.add(value)
    rollout = validate_rollout(doc["rollout"], "assignment.rollout") if "rollout" in doc \
        else None
    if rollout is not None:
        for i, server in enumerate(servers):
            if clashes_with_follow_program(server.name):
                raise Refused(f"servers[{i}].name: {server.name!r} is the follow program's "
                              f"name ({FOLLOW_FILE}) while boxes follow; rename the server")
    tls = validate_tls(doc["tls"], "assignment.tls") if "tls" in doc else None
    return Assignment(host=host, revision=revision, servers=servers, rollout=rollout, tls=tls)


def validate_tls(value: Any, where: str) -> BoxTls:
    """Exactly ``ca_sha256`` (64 lowercase hex digits) and ``leaf_days`` (1 to 90)."""
    if not isinstance(value, dict) or set(value) != {"ca_sha256", "leaf_days"}:
        raise Refused(f"{where}: must be an object with exactly ca_sha256 and leaf_days")
    digest, days = value["ca_sha256"], value["leaf_days"]
    if not (isinstance(digest, str) and CA_SHA256_RE.match(digest)):
        raise Refused(f"{where}.ca_sha256: must be 64 lowercase hexadecimal digits")
    if isinstance(days, bool) or not isinstance(days, (int, Decimal)) \
            or days != int(days) or not 1 <= days <= MAX_LEAF_DAYS:
        raise Refused(f"{where}.leaf_days: must be an integer from 1 to {MAX_LEAF_DAYS}")
    return BoxTls(digest, int(days))


def validate_rollout(value: Any, where: str) -> Rollout:
    """Exactly ``follow_s`` and ``drain_s``, each a finite number within its bounds.

    The follow program sleeps these, so anything else would make it spin or hang.
    """
    if not isinstance(value, dict) or set(value) != set(ROLLOUT_LIMITS):
        raise Refused(f"{where}: must be an object with exactly "
                      f"{' and '.join(ROLLOUT_LIMITS)}")
    numbers = {}
    for key, (low, high) in ROLLOUT_LIMITS.items():
        number = value[key]
        if isinstance(number, bool) or not isinstance(number, (int, float, Decimal)) \
                or not math.isfinite(number) or not low <= number <= high:
            raise Refused(f"{where}.{key}: must be a finite number from {low} to {high}")
        numbers[key] = float(number)
    return Rollout(**numbers)


def validate_server(entry: Any, where: str) -> Server:
    if not isinstance(entry, dict):
        raise Refused(f"{where}: must be an object")
    name = entry.get("name")
    if not (isinstance(name, str) and SERVER_NAME_RE.match(name)):
        raise Refused(f"{where}.name: {shown(name)} must be letters, digits, . _ - (at most 64, "
                      "not starting with . _ -): it names a Supervisor program and a log file")
    box_name_field(entry, "host", where)
    port = entry.get("port")
    if not (isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536):
        raise Refused(f"{where}.port: must be an integer from 1 to 65535")
    api_key = entry.get("api_key")
    if not (isinstance(api_key, str) and API_KEY_RE.match(api_key)):
        raise Refused(f"{where}.api_key: must be 1 to 512 printable ASCII characters without "
                      "spaces or quotes")
    numbers = {key: number_field(entry, key, where) for key in OPTIONAL_NUMBERS}
    max_model_len = numbers["max_model_len"]
    args = normalize_args(entry.get("args", []), f"{where}.args")
    gpus = 1 if numbers["gpus"] is None else int(numbers["gpus"])
    problem = parallel_problem(args, gpus)
    if problem:
        raise Refused(f"{where}.args: {problem}")
    return Server(
        name=name,
        model=command_line_field(entry, "model", where),
        served_model_name=command_line_field(entry, "served_model_name", where),
        port=port,
        api_key=api_key,
        args=args,
        gpu_memory_utilization=numbers["gpu_memory_utilization"],
        max_model_len=None if max_model_len is None else int(max_model_len),
        vram_gb=numbers["vram_gb"],
        disk_gb=numbers["disk_gb"],
        gpus=gpus,
        sets_parallel=bool(parallel_sizes(args)[0]),
    )


def shown(value: Any) -> str:
    """A refused value as a message quotes it: short, control characters escaped."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def box_name_field(entry: dict, key: str, where: str) -> str:
    value = entry.get(key)
    if not (isinstance(value, str) and BOX_NAME_RE.match(value)):
        raise Refused(f"{where}.{key}: must be a box name, 1 to 253 printable ASCII characters "
                      "without spaces")
    return value


def command_line_field(entry: dict, key: str, where: str) -> str:
    """A value that becomes one ``vllm serve`` argument in a Supervisor program."""
    value = entry.get(key)
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise Refused(f"{where}.{key}: must be a string of 1 to {MAX_TEXT} characters")
    problem = text_problem(value)
    if problem:
        raise Refused(f"{where}.{key}: {problem}")
    return value


def number_field(entry: dict, key: str, where: str) -> Decimal | None:
    """An optional recipe number above 0 and within its bound, as an exact Decimal.

    ``max_model_len`` and ``kv_bytes_per_token`` must be JSON integers.
    """
    value = entry.get(key)
    if value is None:
        return None
    limit = NUMBER_LIMITS[key]
    if key in INTEGER_NUMBERS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise Refused(f"{where}.{key}: must be an integer from 1 to {limit}")
    elif isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise Refused(f"{where}.{key}: must be a finite number above 0 and at most {limit}")
    number = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    if not number.is_finite():
        raise Refused(f"{where}.{key}: must be a finite number above 0 and at most {limit}")
    if not 0 < number <= limit:
        raise Refused(f"{where}.{key}: must be above 0 and at most {limit}")
    return number


def normalize_args(value: Any, where: str) -> tuple[str, ...]:
    """Extra ``vllm serve`` arguments: a list of strings, or one string split like a shell."""
    if isinstance(value, str):
        if len(value) > MAX_ARGS * MAX_ARG:
            raise Refused(f"{where}: longer than {MAX_ARGS * MAX_ARG} characters")
        try:
            args = shlex.split(value)
        except ValueError as exc:
            raise Refused(f"{where}: cannot split {shown(value)}: {exc}") from None
    elif isinstance(value, list) and all(isinstance(arg, str) for arg in value):
        args = list(value)
    else:
        raise Refused(f"{where}: must be a list of strings or one string")
    problem = args_problem(args)
    if problem:
        raise Refused(f"{where}: {problem}")
    return tuple(args)
