"""R7 (box side): the box program refuses hostile assignments and environments cleanly.

Each case runs ``install_set.py`` as a box does, in its own process with a time
limit: it must exit 2 with one ``install_set: ...`` line, never a traceback,
never a hang, and write nothing. Numbers are refused as text before they are
converted (``1e999999999`` once hung the program and ate its memory), every
character that could split or disguise a Supervisor line is refused in every
field that reaches one, and so is every spelling of ``--api-key`` that vLLM's
parser would take.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.reliability.box_runs import dry_run, run_box
from tests.unit.box_program.helpers import BOX, Box, load_install_set, payload, server_entry

INSTALL_SET = load_install_set()
GOOD = json.dumps(payload(server_entry(0)))


def with_value(key: str, literal: str) -> bytes:
    """The good payload with ``"key": literal`` in its server, the literal written as is."""
    text = GOOD.replace('"args": []', f'"args": [], "{key}": {literal}', 1)
    assert literal in text
    return text.encode()


@pytest.fixture
def box(tmp_path: Path) -> Box:
    return Box(tmp_path)


def assert_refused(box: Box, ending, says: str = "") -> None:
    assert ending.rc == 2, ending
    assert ending.clean, ending.err
    assert says in ending.err, ending.err
    assert not any(box.conf.iterdir()), "nothing is written"


def test_the_good_payload_is_accepted(box: Box):
    """The control: the payload every case spoils is applied."""
    ending = dry_run(box, GOOD.encode())
    assert (ending.rc, ending.clean) == (0, True), ending.err


@pytest.mark.parametrize(("key", "literal"), [
    ("max_model_len", "1e999999999"),
    ("max_model_len", "9" * 200_000),
    ("max_model_len", "1" + "0" * 5000),
    ("vram_gb", "1e-999999999"),
    ("vram_gb", "-1e999999999"),
    ("disk_gb", "1E+400000"),
    ("gpu_memory_utilization", "0." + "0" * 100_000 + "1"),
    ("vram_gb", "NaN"),
    ("disk_gb", "Infinity"),
    ("disk_gb", "-Infinity"),
    ("max_model_len", "32768.0"),
    ("kv_bytes_per_token", "1.5"),
    ("max_model_len", "100000001"),
    ("vram_gb", "0"),
    ("gpu_memory_utilization", "1.0000001"),
])
def test_absurd_numbers_are_refused_quickly(box: Box, key: str, literal: str):
    ending = dry_run(box, with_value(key, literal))
    assert_refused(box, ending)
    assert ending.seconds < 10, "refused as text, before any conversion"


@pytest.mark.parametrize("document", [
    b"[" * 200_000 + b"]" * 200_000,
    b'{"host": ' * 50_000 + b"1" + b"}" * 50_000,
    b"\xff\xfe not utf-8",
    b'{"host": "203.0.113.10", "servers": [' + b'{},' * 1000 + b"{}]}",
    b"x" * (4 * 2**20 + 1),
])
def test_malformed_documents_are_refused(box: Box, document: bytes):
    assert_refused(box, dry_run(box, document))


# Every character a Supervisor line must not hold, one of each kind.
UNSAFE = ["\x00", "\t", "\n", "\r", "\x1b", "\x7f", "\x85", "\x9f", "\u2028", "\u2029",
          "\u200b", "\u200e", "\u202e", "\u2066", "\ufeff", "\ud800", "\udfff"]
FIELDS = ["name", "model", "served_model_name", "host", "api_key", "args"]


def spoiled(field: str, char: str) -> dict:
    """A server whose ``field`` is valid without ``char`` and holds it in the middle."""
    value = {"name": f"mo{char}del", "model": f"org/mo{char}del", "host": f"box{char}1",
             "served_model_name": f"mo{char}del", "api_key": f"sk-vllm-{char}x",
             "args": ["--x", f"a{char}b"]}[field]
    return payload(server_entry(0, **{field: value}))


@pytest.mark.parametrize("field", FIELDS)
def test_each_field_is_valid_without_the_character(field: str):
    assert INSTALL_SET.validate_assignment(spoiled(field, "")).servers


@pytest.mark.parametrize("char", UNSAFE, ids=lambda c: f"U+{ord(c):04X}")
@pytest.mark.parametrize("field", FIELDS)
def test_unsafe_characters_are_refused_in_every_field(field: str, char: str):
    """In-process for all pairs (quick); the subprocess test below covers the real run."""
    with pytest.raises(INSTALL_SET.Refused, match=r"servers\[0\]"):
        INSTALL_SET.validate_assignment(spoiled(field, char))


@pytest.mark.parametrize("char", ["\u2028", "\x85", "\ud800", "\n"], ids=ascii)
def test_unsafe_characters_end_the_real_run_cleanly(box: Box, char: str):
    """JSON escapes reach the program: a lone surrogate once crashed it when written out."""
    text = json.dumps(payload(server_entry(0, model=f"org/m{char}x")))
    assert_refused(box, dry_run(box, text.encode()), "servers[0].model")


API_KEY_FORMS = [
    ["--api-key", "k"], ["--api-key=k"], ["--api_key=k"], ["--api_key", "k"], ["--api-k", "k"],
    ["--api-ke=k"], ["--api_k=k"], ["--api", "k"], ["--api-key.x", "1"], ["--api_key.x=1"],
    ["--model=--api-key=k"], ["--served-model-name=--api_k=k"],
]


@pytest.mark.parametrize("args", API_KEY_FORMS, ids=lambda args: " ".join(args))
def test_every_api_key_spelling_is_refused_in_args(box: Box, args: list[str]):
    as_list = json.dumps(payload(server_entry(0, args=args))).encode()
    assert_refused(box, dry_run(box, as_list), "would put a bearer on the command line")
    as_line = json.dumps(payload(server_entry(0, args=" ".join(args)))).encode()
    assert_refused(box, dry_run(box, as_line), "would put a bearer on the command line")


@pytest.mark.parametrize("field", ["model", "served_model_name"])
@pytest.mark.parametrize("value", ["--api-key=k", "--api_key", "--api-k=k", "-x"])
def test_no_option_in_place_of_a_model(field: str, value: str):
    with pytest.raises(INSTALL_SET.Refused, match=f"{field}: must not start with '-'"):
        INSTALL_SET.validate_assignment(payload(server_entry(0, **{field: value})))


@pytest.mark.parametrize("args", [["--api-server-count", "2"], ["--x=--apix"],
                                  ["--chat-template", "--api-key in a value is text"]])
def test_other_options_are_not_mistaken_for_the_key(args: list[str]):
    assignment = INSTALL_SET.validate_assignment(payload(server_entry(0, args=args)))
    assert assignment.servers[0].args == tuple(args)


def vllm_like_parser() -> argparse.ArgumentParser:
    """argparse as vLLM configures it: prefix matching on, ``--api-key`` among its options."""
    parser = argparse.ArgumentParser(exit_on_error=False, add_help=False)
    for option in ("--api-key", "--api-server-count", "--allowed-origins", "--model",
                   "--served-model-name", "--chat-template", "--port"):
        parser.add_argument(option)
    return parser


def vllm_spelling(arg: str) -> str:
    """vLLM's own rewrite before argparse: ``_`` to ``-`` in an option name, up to a ``.``."""
    if not arg.startswith("--"):
        return arg
    option, has_value, value = arg.partition("=")
    name, dot, rest = option.partition(".")
    return name.replace("_", "-") + dot + rest + has_value + value


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(
    st.sampled_from(["--api-key", "--api_key", "--api-k", "--api", "--ap", "--a", "--model",
                     "--api-server-count", "--served_model_name", "--port"]),
    st.builds(lambda head, tail: head + tail, st.sampled_from(["--api", "--api_", "--ap", "--"]),
              st.text("-_kaeyi=.", max_size=6)),
    st.text("abk=-_", max_size=6)), min_size=1, max_size=4))
def test_whatever_argparse_reads_as_the_key_is_refused(args: list[str]):
    """A parser configured like vLLM's is the judge: if it sets api_key, the box refused."""
    try:
        parsed, _ = vllm_like_parser().parse_known_args([vllm_spelling(arg) for arg in args])
    except (argparse.ArgumentError, SystemExit):
        return
    if parsed.api_key is not None:
        with pytest.raises(INSTALL_SET.Refused):
            INSTALL_SET.validate_assignment(payload(server_entry(0, args=args)))


@pytest.mark.parametrize(("name", "value", "says"), [
    ("LLMAO_HOST", "bøx-1", "LLMAO_HOST must be the box's name"),
    ("LLMAO_HOST", b"box-\xff", "LLMAO_HOST must be the box's name"),
    ("LLMAO_HOST", "box\u2028two", "LLMAO_HOST must be the box's name"),
    ("LLMAO_HOST", "box one", "LLMAO_HOST must be the box's name"),
    ("FLEET_KEY", "clé-de-flotte-0123456789", "FLEET_KEY must be printable ASCII"),
    ("FLEET_KEY", b"key-\xfe\xff", "FLEET_KEY must be printable ASCII"),
    ("FLEET_KEY", "key\x1bzero", "FLEET_KEY must be printable ASCII"),
    ("LLMAO_URL", "https://llmäo.example", "LLMAO_URL must be printable ASCII"),
    ("LLMAO_FETCH_ATTEMPTS", "9" * 100_000, "LLMAO_FETCH_ATTEMPTS"),
])
def test_a_hostile_environment_exits_2_with_a_message(box: Box, name: str, value, says: str):
    env = {"LLMAO_URL": "http://127.0.0.1:9", "FLEET_KEY": "fleet-key-0123456789",
           "LLMAO_HOST": BOX, name: value}
    ending = run_box(box, "--dry-run", env=env)
    assert_refused(box, ending, says)
    secret = value if isinstance(value, str) and name == "FLEET_KEY" else None
    assert secret is None or secret not in ending.err
