"""Container boxes for real: supervisord as PID 1 runs the vLLM stub, restarts it when it dies,
and the engine's published ports and labels act as the provider listing."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from rig.boxes import free_port, host_gateway_address, list_published

pytestmark = pytest.mark.docker

KEY = "sk-vllm-box-test-bearer-abcdef"
PROGRAM = f"""\
[program:m]
command=vllm serve m --host 0.0.0.0 --port 8001 --served-model-name m
environment=VLLM_API_KEY="{KEY}"
autorestart=true
startsecs=1
redirect_stderr=true
stdout_logfile=/var/log/supervisor/m.log
"""


def eventually(check: Callable[[], object], timeout: float = 20.0):
    """Poll check until it returns something truthy; fail with its last value after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met in {timeout} s (last value {value!r})")
        time.sleep(0.2)


def get(url: str, key: str | None = None) -> int | None:
    """Status of a GET, or None when nothing answers yet."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def chat(url: str, key: str) -> str:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    request = urllib.request.Request(f"{url}/v1/chat/completions", body, headers)
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.load(response)["choices"][0]["message"]["content"]


def program_pid(box) -> int:
    """The stub's PID while Supervisor says RUNNING, else 0."""
    status = box.supervisorctl("status", "m").stdout.decode()
    return int(box.supervisorctl("pid", "m").stdout) if "RUNNING" in status else 0


def test_supervised_stub_serves_through_the_published_port_and_restarts(box_factory):
    box = box_factory("203.0.113.10")
    box.put_file("/etc/supervisor/conf.d/m.conf", PROGRAM, 0o600)
    box.supervisorctl("reread", check=True)
    box.supervisorctl("update", check=True)
    first_pid = eventually(lambda: program_pid(box))

    url = box.url(8001)
    assert eventually(lambda: get(f"{url}/health")) == 200
    assert get(f"{url}/v1/models") == 401
    assert get(f"{url}/v1/models", KEY) == 200
    assert chat(url, KEY) == "answered by 203.0.113.10 port 8001"
    assert KEY not in box.exec(["ps", "-eo", "args"]).stdout.decode()

    box.exec(["kill", "-9", str(first_pid)])
    second_pid = eventually(lambda: (pid := program_pid(box)) != first_pid and pid)
    assert second_pid != first_pid
    assert eventually(lambda: get(f"{url}/health")) == 200


def test_listing_names_each_box_with_its_loopback_ports(box_factory):
    first = box_factory("203.0.113.20")
    second = box_factory("2001:db8::7", publish=(8001,))
    listing = list_published()
    assert listing["203.0.113.20"] == {
        port: ("127.0.0.1", first.public_port(port)) for port in (8001, 8002, 8003)
    }
    assert listing["2001:db8::7"] == {8001: ("127.0.0.1", second.public_port(8001))}
    second.remove()
    assert "2001:db8::7" not in list_published()


def test_box_gets_its_name_env_and_stub_files(box_factory):
    gpu = {"gpus": [{"total_mib": 49152, "free_mib": 47000}]}
    box = box_factory("box-env", env={"FLEET_KEY": "fleet-secret"}, gpu=gpu)
    assert box.exec(["printenv", "LLMAO_BOX_NAME", "FLEET_KEY"]).stdout.split() == [
        b"box-env",
        b"fleet-secret",
    ]
    query = ["nvidia-smi", "--query-gpu=memory.total,memory.free", "--format=csv,noheader,nounits"]
    assert box.exec(query).stdout == b"49152, 47000\n"
    assert json.loads(box.read_file("/etc/llmao-stub/gpu.json")) == gpu


def test_box_reaches_a_host_server_on_the_bridge_gateway(box_factory):
    class Hello(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"hello box")

        def log_message(self, *args):
            pass

    gateway = host_gateway_address()
    server = HTTPServer((gateway, free_port(gateway)), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        box = box_factory("box-dialer")
        script = (
            "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())"
        )
        url = f"http://{gateway}:{server.server_address[1]}/"
        assert box.exec(["python3", "-c", script, url]).stdout == b"hello box\n"
    finally:
        server.shutdown()
        server.server_close()
