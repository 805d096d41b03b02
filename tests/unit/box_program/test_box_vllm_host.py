"""VLLM_HOST: the address the programs bind, so boxes that share one machine (the demo's local
boxes, one loopback address each) do not collide on the listen ports. Unset, the programs bind
0.0.0.0 as before, so the push path and existing boxes are unchanged."""

from __future__ import annotations

import pytest

from .helpers import payload, server_entry


def command_line(box, run_main) -> str:
    outcome = run_main("--payload", str(box.write_payload(payload(server_entry(0)))))
    assert outcome.rc == 0, outcome.err
    (line,) = [line for line in box.program("model-0").read_text().splitlines()
               if line.startswith("command=")]
    return line


def test_unset_the_programs_bind_every_address(box, run_main, monkeypatch):
    monkeypatch.delenv("VLLM_HOST", raising=False)
    assert " --host 0.0.0.0 --port 8001 " in command_line(box, run_main)


@pytest.mark.parametrize("address", ["127.0.0.2", "::1", "10.1.2.3"])
def test_the_programs_bind_the_address_given(box, run_main, monkeypatch, address):
    monkeypatch.setenv("VLLM_HOST", f" {address} ")
    assert f" --host {address} --port 8001 " in command_line(box, run_main)


@pytest.mark.parametrize("value", ["box.example", "127.0.0.2 --api-key x", "127.0.0.300"])
def test_anything_but_an_address_is_refused_before_writing(box, run_main, monkeypatch, value):
    monkeypatch.setenv("VLLM_HOST", value)
    outcome = run_main("--payload", str(box.write_payload(payload(server_entry(0)))))
    assert outcome.rc == 2
    assert "VLLM_HOST" in outcome.err and "must be an IP address" in outcome.err
    assert not box.program("model-0").exists()
