"""The assignment's shape: what is accepted, normalised, and refused with the path of the fault."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from .helpers import BOX, payload, server_entry


def test_a_full_assignment_is_read_with_exact_numbers(install_set):
    doc = json.loads(json.dumps(payload(server_entry(
        0, gpu_memory_utilization=0.35, max_model_len=32768, vram_gb=18.5, disk_gb=60,
        kv_bytes_per_token=98304))), parse_float=Decimal)
    assignment = install_set.validate_assignment(doc)
    assert assignment.host == BOX and assignment.revision == "rev-0001"
    (server,) = assignment.servers
    assert server.gpu_memory_utilization == Decimal("0.35")
    assert server.vram_gb == Decimal("18.5") and server.disk_gb == 60
    assert server.max_model_len == 32768 and server.port == 8001


def test_the_revision_may_be_absent(install_set):
    assert install_set.validate_assignment(payload(revision=None)).revision is None


@pytest.mark.parametrize("args, argv", [
    (["--reasoning-parser", "gemma", "--chat-template", "a b"],
     ("--reasoning-parser", "gemma", "--chat-template", "a b")),
    ("--reasoning-parser gemma --chat-template 'a b'",
     ("--reasoning-parser", "gemma", "--chat-template", "a b")),
    ("--limit-mm-per-prompt '{\"image\": 2}'", ("--limit-mm-per-prompt", '{"image": 2}')),
    ("", ()),
    ([], ()),
])
def test_args_are_a_list_or_one_string_split_like_a_shell(install_set, args, argv):
    assignment = install_set.validate_assignment(payload(server_entry(0, args=args)))
    assert assignment.servers[0].args == argv


def test_absent_args_mean_none(install_set):
    entry = server_entry(0)
    del entry["args"]
    assert install_set.validate_assignment(payload(entry)).servers[0].args == ()


@pytest.mark.parametrize("doc, says", [
    ([], "assignment: must be a JSON object"),
    ({"servers": []}, "assignment.host: must be a box name"),
    ({"host": BOX}, "assignment.servers: must be a list"),
    ({"host": BOX, "servers": [], "revision": 7}, "assignment.revision: must be a string of 1 to"),
    (payload("x"), "servers[0]: must be an object"),
    (payload(server_entry(0, model="")), "servers[0].model: must be a string of 1 to 512"),
    (payload(server_entry(0, model="a\nb")), "servers[0].model: holds a control"),
    (payload(server_entry(0, served_model_name=None)), "servers[0].served_model_name: must be"),
    (payload(server_entry(0, name="../etc")), "servers[0].name: '../etc' must be letters"),
    (payload(server_entry(0, name="a b")), "servers[0].name: 'a b' must be letters"),
    (payload(server_entry(0, port="8001")), "servers[0].port: must be an integer"),
    (payload(server_entry(0, port=True)), "servers[0].port: must be an integer"),
    (payload(server_entry(0, port=70000)), "servers[0].port: must be an integer"),
    (payload(server_entry(0, api_key="")), "servers[0].api_key: must be 1 to 512"),
    (payload(server_entry(0, api_key='sk"x')), "servers[0].api_key: must be"),
    (payload(server_entry(0, api_key="sk x")), "servers[0].api_key: must be"),
    (payload(server_entry(0, args=[1])), "servers[0].args: must be a list of strings"),
    (payload(server_entry(0, args={"a": 1})), "servers[0].args: must be a list of strings"),
    (payload(server_entry(0, args="--x 'unclosed")), "servers[0].args: cannot split"),
    (payload(server_entry(0, args=["--api-key", "k"])), "'--api-key' would put a bearer"),
    (payload(server_entry(0, args="--api-key=k")), "'--api-key' would put a bearer"),
    (payload(server_entry(0, args=["a\rb"])), "holds a control, format or line-separator"),
    (payload(server_entry(0, vram_gb="18")), "servers[0].vram_gb: must be a finite number"),
    (payload(server_entry(0, disk_gb=-1)), "servers[0].disk_gb: must be above 0"),
    (payload(server_entry(0, gpu_memory_utilization=0)), "must be above 0 and at most 1"),
    (payload(server_entry(0, gpu_memory_utilization=1.5)), "must be above 0 and at most 1"),
    (payload(server_entry(0, max_model_len=0.5)), "max_model_len: must be an integer from 1"),
    (payload(server_entry(0), server_entry(1, name="model-0")), "servers[1].name: 'model-0' "
                                                                "appears twice"),
    (payload(server_entry(0), server_entry(1, port=8001)), "servers[1].port: 8001 appears twice"),
])
def test_a_malformed_assignment_is_refused_naming_the_fault(install_set, doc, says):
    with pytest.raises(install_set.Refused) as refused:
        install_set.validate_assignment(doc)
    assert says in str(refused.value)


def test_a_refusal_never_quotes_the_bearer(install_set):
    bearer = "sk-vllm-SECRET-in-a-bad-row"
    with pytest.raises(install_set.Refused) as refused:
        install_set.validate_assignment(payload(server_entry(0, api_key=bearer, port=0)))
    assert bearer not in str(refused.value)


def test_unknown_keys_are_ignored_for_forward_compatibility(install_set):
    doc = payload(server_entry(0, future_field={"x": 1}))
    doc["future"] = True
    assert install_set.validate_assignment(doc).servers[0].name == "model-0"


def test_a_payload_file_that_is_not_json_is_refused(box, run_main):
    path = box.root / "bad.json"
    path.write_text("{not json")
    outcome = run_main("--payload", str(path))
    assert outcome.rc == 2 and "is not valid JSON" in outcome.err


def test_a_missing_payload_file_is_refused(box, run_main):
    outcome = run_main("--payload", str(box.root / "absent.json"))
    assert outcome.rc == 2 and "cannot read the payload" in outcome.err
