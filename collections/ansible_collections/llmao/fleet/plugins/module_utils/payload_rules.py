# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a box's assignment may hold: the rules the loaders check and the box program applies.

Whatever loads must be accepted by the box, or a config that llmao serves would
strand a box at boot. The box program (``roles/vllm_box/files/install_set.py``)
runs with the standard library alone, so this module imports nothing else: the
program's build (``scripts/build_box_program.py``) carries it into the one file a
box fetches, and the box applies these very rules. A property test
(``tests/reliability/test_config_box_agreement.py``) feeds every config that loads
to the box.

Every value here ends on a ``vllm serve`` command line or in a Supervisor
program, so the rules refuse what would change its meaning there: control,
format and line-separator characters (a Supervisor line split in two, a name
that reads differently than it runs, a lone surrogate that cannot be written
as UTF-8), a value vLLM would read as an option, and unbounded sizes.
"""

from __future__ import annotations

import re

# Box names are addresses or provider ids: printable ASCII, sent as the X-LLMAO-Host header.
BOX_NAME_RE = re.compile(r"[!-~]{1,253}\Z")
# A server's name names a Supervisor program and a log file.
SERVER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
# A bearer survives Supervisor's environment= parser intact: no space, quote or apostrophe.
API_KEY_RE = re.compile(r"[!#-&(-~]{1,512}\Z")
# C0 and C1 controls, zero-width and direction marks, line and paragraph separators, bidi
# embeddings and isolates, word joiners, the byte order mark, lone surrogates.
UNSAFE_CHAR_RE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ud800-\udfff]")
MAX_TEXT = 512
MAX_ARGS = 128
MAX_ARG = 4096
MAX_SERVERS = 3
API_KEY_FLAG = "--api-key"
# Upper bounds of the optional recipe numbers; each is also above 0.
# ``gpus`` is the number of cards one server spans (``vram_gb`` is then per card).
NUMBER_LIMITS = {"gpu_memory_utilization": 1, "max_model_len": 10**8, "vram_gb": 10**5,
                 "disk_gb": 10**6, "kv_bytes_per_token": 10**9, "gpus": 16}
INTEGER_NUMBERS = frozenset({"max_model_len", "kv_bytes_per_token", "gpus"})
# The ``vllm serve`` options that split one server over cards, by the size they set; the
# product of the sizes is the number of cards the server spans.
PARALLEL_FLAGS = {"--tensor-parallel-size": "tensor", "-tp": "tensor",
                  "--pipeline-parallel-size": "pipeline", "-pp": "pipeline"}
PARALLEL_SIZE_RE = re.compile(r"[0-9]{1,2}\Z")
# The payload's ``rollout`` object (sent only when boxes follow): its keys and their bounds.
ROLLOUT_LIMITS = {"follow_s": (1, 86400), "drain_s": (0, 3600)}
# A revision names an assignment. llmao makes them short (``intent.REVISION_LENGTH``); a box
# applies one of up to this many characters, and reports and asks turns with what it applied.
MAX_REVISION = 128
# The Supervisor program a following box runs to follow llmao; a server's program is
# ``llmao-<name>``, so while boxes follow, no server may be named so that they clash.
FOLLOW_PROGRAM = "llmao-follow"


def clashes_with_follow_program(server_name: str) -> bool:
    """Whether a server of this name would take the follow program's name on a box."""
    return FOLLOW_PROGRAM in (server_name, f"llmao-{server_name}")


def text_problem(value: str) -> str | None:
    """Why a model id or served name cannot reach ``vllm serve`` as one argument, or None."""
    if not value or len(value) > MAX_TEXT:
        return f"must be 1 to {MAX_TEXT} characters"
    if UNSAFE_CHAR_RE.search(value):
        return "holds a control, format or line-separator character"
    if value != value.strip():
        return "must not start or end with whitespace"
    if value.startswith("-"):
        return "must not start with '-': vLLM would read it as an option"
    return None


def revision_problem(value: object) -> str | None:
    """Why ``value`` is not a revision a box applies (nor one it may report or ask a turn
    for), or None."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_REVISION \
            or UNSAFE_CHAR_RE.search(value):
        return f"must be a string of 1 to {MAX_REVISION} characters without control characters"
    return None


def names_api_key_flag(arg: str) -> bool:
    """Whether vLLM's parser could read ``arg`` (or a value it carries) as ``--api-key``.

    vLLM's ``FlexibleArgumentParser`` turns ``_`` into ``-`` in an option's name
    (up to the first ``.``, which starts a JSON sub-key) and leaves argparse's
    prefix matching on, so ``--api_k=x`` and ``--api-key.x 1`` set the key too.
    ``--model=X`` moves ``X`` to the front, where it is parsed again: values are
    checked as well.
    """
    while arg.startswith("--"):
        option, has_value, value = arg.partition("=")
        option = option.split(".", 1)[0].replace("_", "-")
        if len(option) > 2 and API_KEY_FLAG.startswith(option):
            return True
        if not has_value:
            return False
        arg = value
    return False


def args_problem(args: list[str] | tuple[str, ...]) -> str | None:
    """Why these extra ``vllm serve`` arguments cannot be run as given, or None."""
    if len(args) > MAX_ARGS:
        return f"at most {MAX_ARGS} arguments"
    for arg in args:
        if len(arg) > MAX_ARG:
            return f"an argument is longer than {MAX_ARG} characters"
        if UNSAFE_CHAR_RE.search(arg):
            return f"{arg[:40]!r} holds a control, format or line-separator character"
        if names_api_key_flag(arg):
            return (f"{arg.split('=', 1)[0][:40]!r} would put a bearer on the command line; "
                    "the program passes it as VLLM_API_KEY")
    return None


def parallel_sizes(args: list[str] | tuple[str, ...]) -> tuple[dict[str, int], str | None]:
    """The tensor and pipeline parallel sizes ``args`` set, and why they cannot be read.

    vLLM turns ``_`` into ``-`` in an option's name and lets argparse take an
    abbreviation, so ``--tensor_parallel_size`` counts, and a shortened name is
    refused (write it in full): the box must know exactly what vLLM will read. A
    size is an integer from 1 to 16, given once, as ``--flag N`` or ``--flag=N``.
    """
    sizes: dict[str, int] = {}
    pending = list(args)
    while pending:
        arg = pending.pop(0)
        option, has_value, value = arg.partition("=")
        option = option.replace("_", "-") if option.startswith("--") else option
        kind = PARALLEL_FLAGS.get(option)
        if kind is None:
            if option.startswith("--") and len(option) > 2 and any(
                    flag.startswith(option) for flag in PARALLEL_FLAGS):
                return sizes, (f"{option[:40]!r} abbreviates a parallel size option: "
                               "write it in full")
            continue
        if not has_value:
            value = pending.pop(0) if pending else ""
        if kind in sizes:
            return sizes, f"the {kind} parallel size is set twice"
        if not (PARALLEL_SIZE_RE.match(value) and 1 <= int(value) <= NUMBER_LIMITS["gpus"]):
            return sizes, f"{option} needs an integer from 1 to 16, not {value[:40]!r}"
        sizes[kind] = int(value)
    return sizes, None


def parallel_problem(args: list[str] | tuple[str, ...], gpus: int) -> str | None:
    """Why ``args`` and ``gpus`` disagree on the cards one server spans, or None.

    Without a parallel size in ``args`` the box adds ``--tensor-parallel-size``
    itself (when ``gpus`` is above 1); with one, tensor x pipeline must be ``gpus``.
    """
    sizes, problem = parallel_sizes(args)
    if problem or not sizes:
        return problem
    product = sizes.get("tensor", 1) * sizes.get("pipeline", 1)
    if product != gpus:
        return (f"tensor x pipeline parallel size is {sizes.get('tensor', 1)} x "
                f"{sizes.get('pipeline', 1)} = {product} cards, but gpus is {gpus}: "
                f"set gpus: {product}, or change the sizes")
    return None
