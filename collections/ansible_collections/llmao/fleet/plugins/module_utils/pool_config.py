# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``pools:`` and ``budget:`` of ``config.yaml``: the boxes llmao rents itself (docs/pools.md).

A pool is a set of interchangeable rented boxes that all serve the same rows. This module
reads and checks what can be checked from ``config.yaml`` alone (the provider, the offer, the
sizes, the budget against every pool's dearest box); the rows' models are joined with
``models.yaml`` by :mod:`fleet`, through the very rule a ``fleet.hosts`` row goes through.
Rows are read by ``config_file``'s row reader, handed in, so a pool's ``serve`` and a
``fleet.hosts`` box are one format with one set of messages.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .field_checks import Section, shown, type_name

if TYPE_CHECKING:
    from .config_file import HostRow, Provider

# The providers llmao can rent from (the listings' kinds that have a rent API).
RENT_PROVIDERS = ("vast", "runpod")
# A pool's name goes into every instance's label and every box name it rents: short and plain.
POOL_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
MAX_POOLS = 50
MAX_POOL_BOXES = 100
MAX_GPU_NAMES = 20
MAX_GPUS = 16
# $/h bounds: a box dearer than this, or a budget larger, is a typo.
MAX_USD_PER_HOUR = 10_000.0
MAX_IDLE_S = 7 * 86400.0
MAX_PASSES = 1000
DEFAULT_IMAGES = MappingProxyType({"vast": "vllm/vllm-openai:latest",
                                   "runpod": "llmao/vllm-box:latest"})
# The environment llmao itself gives a rented box: a pool's env may not name these.
OWN_ENV = ("FLEET_KEY", "LLMAO_URL", "LLMAO_BOOTSTRAP_TOKEN", "LLMAO_POOL_BOX")
ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]{0,63}$")
MAX_ENV = 50
IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$")

# Every instance a pool rents is labelled ``llmao-pool:<pool>/<box>``: the mark that it is
# llmao's (nothing without it is ever stopped or destroyed), its pool, and the box name llmao
# gave it before renting (the name its bootstrap token was minted for).
LABEL_PREFIX = "llmao-pool:"
BOX_SUFFIX_RE = re.compile(r"^[a-z0-9]{8}$")

RowReader = Callable[[Section, str, Any, list[str]], "tuple[HostRow, ...]"]


@dataclass(frozen=True)
class Offer:
    """What a rented box must be: which GPUs, how many, their memory, the disk, the most
    it may cost an hour, and whether an interruptible (bid, spot) instance will do."""

    gpu_names: tuple[str, ...]
    max_usd_per_hour: float
    num_gpus: int = 1
    min_gpu_ram_gb: float = 0.0
    disk_gb: float = 50.0
    interruptible: bool = False


@dataclass(frozen=True)
class Pool:
    """One ``pools.<name>``: where its boxes are rented, what they are, how many, what they
    serve, and when it grows (``scale_up_passes`` saturated passes) or shrinks (idle for
    ``idle_s``)."""

    name: str
    provider: str
    offer: Offer
    min_boxes: int
    max_boxes: int
    rows: tuple[HostRow, ...]
    image: str
    scale_up_passes: int = 3
    idle_s: float = 1800.0
    # What the box template needs besides what llmao sets (Vast's PROVISIONING_SCRIPT and
    # INSTALL_SET_URL, DATA_DIRECTORY, SSL_CERT_FILE...), and Vast's onstart command.
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    onstart: str = ""


@dataclass(frozen=True)
class Budget:
    """``budget:``: the most every pool's boxes together may cost an hour."""

    max_usd_per_hour: float


def instance_label(pool: str, box: str) -> str:
    """The label of the instance rented for ``box`` of ``pool``."""
    return f"{LABEL_PREFIX}{pool}/{box}"


def box_name(pool: str, suffix: str) -> str:
    """A pool box's fleet name: the pool's name and 8 random lowercase letters or digits."""
    return f"{pool}-{suffix}"


def read_label(label: Any) -> tuple[str, str] | None:
    """(pool, box) of an instance label llmao wrote, or None for any other label: an
    instance without llmao's exact mark is not llmao's."""
    if not isinstance(label, str) or not label.startswith(LABEL_PREFIX) or len(label) > 100:
        return None
    pool, slash, box = label[len(LABEL_PREFIX):].partition("/")
    if not slash or not POOL_NAME_RE.match(pool) or not box.startswith(f"{pool}-"):
        return None
    return (pool, box) if BOX_SUFFIX_RE.match(box[len(pool) + 1:]) else None


def read_pools(top: Section, providers: Mapping[str, Provider],
               read_rows: RowReader, warnings: list[str]) -> Mapping[str, Pool]:
    """``pools:`` of ``top`` (absent: none), each pool checked alone."""
    section = top.sub("pools")
    pools: dict[str, Pool] = {}
    if len(section.mapping) > MAX_POOLS:
        top.problem("pools", f"has {len(section.mapping)} pools; at most {MAX_POOLS}")
        return MappingProxyType({})
    for name in list(section.mapping):
        if not isinstance(name, str) or not POOL_NAME_RE.match(name):
            section.problem(str(name), "a pool name must be 1 to 32 lowercase letters, digits "
                                       "or '-', starting with a letter or digit (it goes into "
                                       "every box name and label the pool makes)")
            section.raw(name)
            continue
        pool = _read_pool(section.sub(name, required=True), name, providers, read_rows,
                          warnings)
        if pool is not None:
            pools[name] = pool
    section.close()
    return MappingProxyType(pools)


def _read_pool(section: Section, name: str, providers: Mapping[str, Provider],
               read_rows: RowReader, warnings: list[str]) -> Pool | None:
    provider = section.text("provider", required=True)
    if provider is not None and provider not in RENT_PROVIDERS:
        section.problem("provider", f"must be one of {', '.join(RENT_PROVIDERS)}, "
                                    f"not {shown(provider)}")
        provider = None
    elif provider is not None and provider not in providers:
        section.problem("provider", f"{provider} has no providers.{provider} (its api_key): "
                                    "llmao rents with the listing's key")
    offer = _read_offer(section.sub("offer", required=True))
    if provider == "runpod" and offer.interruptible:
        section.problem("offer.interruptible", "RunPod's v2 create has no spot pods: a runpod "
                                               "pool rents on-demand pods only")
    low, high = _read_sizes(section.sub("boxes", required=True))
    rows = read_rows(section, "serve", section.raw("serve", None), warnings)
    if not rows and section.raw("serve", None) is None:
        section.problem("serve", "is required: the rows every box of the pool serves")
    image = section.text("image", DEFAULT_IMAGES.get(provider or "", ""))
    if image is not None and not IMAGE_RE.match(image):
        section.problem("image", f"must be a container image reference, not {shown(image)}")
    pool = Pool(name, provider or "", offer, low, high, rows, image or "",
                scale_up_passes=section.integer("scale_up_passes", Pool.scale_up_passes,
                                                maximum=MAX_PASSES),
                idle_s=section.number("idle_s", Pool.idle_s, maximum=MAX_IDLE_S),
                env=_read_env(section), onstart=section.text("onstart", "") or "")
    if len(pool.onstart) > 4096 or "\x00" in pool.onstart:
        section.problem("onstart", "must be a shell command of at most 4096 characters")
    section.close()
    return pool if provider and offer.gpu_names and section.valid else None


def _read_env(pool: Section) -> Mapping[str, str]:
    """``env``: names to string values for the box template, none of llmao's own."""
    value = pool.raw("env", None)
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, dict) or len(value) > MAX_ENV:
        pool.problem("env", f"must be a mapping of at most {MAX_ENV} variable names to strings")
        return MappingProxyType({})
    env = {}
    for name, text in value.items():
        if not isinstance(name, str) or not ENV_NAME_RE.match(name) or name in OWN_ENV:
            pool.problem(f"env.{name}", "must be an upper-case variable name other than "
                                        f"{', '.join(OWN_ENV)} (llmao sets those)")
        elif not isinstance(text, str) or len(text) > 4096 or "\x00" in text:
            pool.problem(f"env.{name}", "must be a string of at most 4096 characters")
        else:
            env[name] = text
    return MappingProxyType(env)


def _read_offer(section: Section) -> Offer:
    names = section.raw("gpu_names", None)
    if not isinstance(names, list) or not 0 < len(names) <= MAX_GPU_NAMES or \
            not all(isinstance(gpu, str) and 0 < len(gpu.strip()) <= 64 for gpu in names):
        section.problem("gpu_names", f"must be a list of 1 to {MAX_GPU_NAMES} GPU names "
                                     f"(\"RTX 4090\"), not {type_name(names)}")
        names = []
    offer = Offer(
        gpu_names=tuple(gpu.strip() for gpu in names),
        max_usd_per_hour=section.number("max_usd_per_hour", 0.0, maximum=MAX_USD_PER_HOUR)
        or 0.0,
        num_gpus=section.integer("num_gpus", Offer.num_gpus, maximum=MAX_GPUS),
        min_gpu_ram_gb=section.number("min_gpu_ram_gb", Offer.min_gpu_ram_gb,
                                      maximum=100_000),
        disk_gb=section.number("disk_gb", Offer.disk_gb, maximum=1_000_000),
        interruptible=section.flag("interruptible", Offer.interruptible))
    if section.valid and section.raw("max_usd_per_hour", None) is None:
        section.problem("max_usd_per_hour", "is required: the most one box may cost an hour")
    section.close()
    return offer


def _read_sizes(section: Section) -> tuple[int, int]:
    low = section.integer("min", 0, minimum=0, maximum=MAX_POOL_BOXES)
    high = section.integer("max", None, maximum=MAX_POOL_BOXES)
    if high is None:
        if section.valid and section.raw("max", None) is None:
            section.problem("max", "is required: the most boxes the pool may rent")
        high = max(low or 0, 1)
    if low is not None and low > high:
        section.problem("", f"min {low} > max {high}")
    section.close()
    return min(low or 0, high), high


def read_budget(top: Section, pools: Mapping[str, Pool]) -> Budget | None:
    """``budget:``; required once a pool is set, and at least one box of each pool's dearest
    offer (a budget below it could never rent that pool a box)."""
    section = top.sub("budget")
    most = section.number("max_usd_per_hour", None, maximum=MAX_USD_PER_HOUR)
    if most is None and section.raw("max_usd_per_hour", None) is None and pools:
        section.problem("max_usd_per_hour", "is required while pools are set: the most every "
                                            "pool's boxes together may cost an hour")
    section.close()
    if most is None:
        return None
    for pool in pools.values():
        if most < pool.offer.max_usd_per_hour:
            section.problem("max_usd_per_hour",
                            f"{most:g} $/h is below one box of pool {pool.name} "
                            f"(offer.max_usd_per_hour {pool.offer.max_usd_per_hour:g})")
    return Budget(most)
