"""`make demo` and `make demo-stop`: bring the local fleet up step by step, or stop it all.

`make demo` returns once everything is up and leaves the services running in the background:
what it prints are commands to try next in the same shell, and a demo that held the terminal
would need a second one for them. `make demo-stop` (or Ctrl-C / a failure during start-up) stops
every process and container the record names, and the dockerd only when the demo started it.
A second `make demo` while one runs starts nothing and prints the same summary again.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig.box_image import BASE_TAG, image_exists
from rig.boxes import BOX_LABEL, host_gateway_address
from rig.dockerd import EngineError, ensure_engine, our_pid, stop_engine
from rig.litellm_process import LiteLLMMissing, litellm_python
from rig.tls import make_server_tls

from .boxes import (
    BoxBoot,
    boot_boxes,
    box_token,
    container_running,
    remove_container,
    wait_serving,
    write_reach_inventory,
)
from .fleet import (
    ROLLOUT,
    add_box_token,
    make_fleet_ca,
    template_boxes,
    template_port,
    write_credential_files,
    write_demo_fleet,
    write_prometheus_config,
)
from .paths import ToolMissing, demo_dir, shown, venv_tool
from .processes import Record, stop_process
from .reconcile import interval_s, run_pass, start_loop
from .services import chat, launch_litellm, owned_routes, pick_port, start_llmao, wait_litellm
from .summary import Summary

MODE_ENV = "LLMAO_DEMO_BOXES"
STEPS = 5
LOCK_NAME = "lock"
# Prometheus's own port, for the command the summary prints (another when it is taken).
PROMETHEUS_PORT = 9090


class Progress:
    """One line per step: its title when it starts, what came of it and its time when done."""

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.step_began = self.began
        self.open = False

    def step(self, number: int, title: str) -> None:
        self.end_line()
        print(f"[{number}/{STEPS}] {title}:", end="", flush=True)
        self.step_began, self.open = time.monotonic(), True

    def add(self, text: str) -> None:
        print(f" {text}", end="", flush=True)

    def done(self, text: str = "") -> None:
        print(f" {text}{' ' if text else ''}({time.monotonic() - self.step_began:.1f} s)",
              flush=True)
        self.open = False

    def end_line(self) -> None:
        if self.open:
            print(flush=True)
            self.open = False

    def total(self) -> float:
        return time.monotonic() - self.began


@contextmanager
def locked(folder: Path) -> Iterator[None]:
    """One `demo` or `demo stop` at a time: a second one waits, then finds the work done."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # it holds the run's secrets
    with open(folder / LOCK_NAME, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def running(record: Record) -> bool:
    return (record.phase == "up" and all(entry.alive() for entry in record.processes)
            and all(container_running(container) for container in record.containers))


def stop_recorded(record: Record) -> None:
    """Stop everything the record names: the loop first (so it stops acting), then the rest in
    reverse start order, then the dockerd the demo started."""
    for entry in reversed(record.processes):
        if entry.role == "reconcile loop":
            stop_process(entry)
    for container in reversed(record.containers):
        remove_container(container)
    for entry in reversed(record.processes):
        stop_process(entry)
    if record.dockerd_pid is not None and our_pid() == record.dockerd_pid:
        stop_engine()
    record.phase = "stopped"
    record.save()


def clear(folder: Path) -> None:
    """Drop an earlier run's files (its secrets, state and logs); the lock stays."""
    for entry in folder.iterdir():
        if entry.name == LOCK_NAME:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


@dataclass(frozen=True)
class Layout:
    """What differs between the two kinds of boxes: their names, where llmao-server binds
    (the address boxes reach it at), and the provider listing that maps their ports."""

    mode: str
    boxes: list[str]
    llmao_host: str
    providers: dict[str, Any] | None

    @classmethod
    def local(cls) -> Layout:
        return cls("local", template_boxes(), "127.0.0.1", None)

    @classmethod
    def container(cls) -> Layout:
        boxes = [f"demo-box-{index}" for index in range(1, len(template_boxes()) + 1)]
        return cls("container", boxes, host_gateway_address(),
                   {"docker": {"label": BOX_LABEL}})

    @property
    def certificate_names(self) -> list[str]:
        return [self.llmao_host, "localhost"] if self.mode == "local" else [self.llmao_host]


class CannotStart(RuntimeError):
    """Something the demo needs is missing; the message names the command that brings it."""


def check_common_needs() -> None:
    """What either kind of box needs, checked before anything starts: the demo's own tools
    (supervisord, llmao-server, ansible-playbook in .venv) and the LiteLLM environment."""
    try:
        for tool in ("llmao-server", "supervisord", "ansible-playbook"):
            venv_tool(tool)
        litellm_python()
    except (ToolMissing, LiteLLMMissing) as exc:  # each names `make setup`
        raise CannotStart(str(exc)) from None


def container_needs() -> str | None:
    """Why container boxes cannot run here (with the command that fixes it), or None.

    The box image is built once from a base image that debootstrap makes (rig/box_image.py);
    without debootstrap and without that image, container boxes fail minutes in. Asked only
    once an engine answers (the image is the engine's)."""
    if image_exists(BASE_TAG) or shutil.which("debootstrap"):
        return None
    return ("debootstrap is not installed and the box image is not built: `apt-get install "
            f"debootstrap` (then `make demo`), or run local boxes: {MODE_ENV}=local make demo")


def choose_layout(record: Record) -> tuple[Layout, str]:
    """The layout and why. LLMAO_DEMO_BOXES=local|container forces one; by default container
    boxes when an engine answers (or dockerd can be started) and the box image can be had,
    else local processes. A forced kind that cannot run stops here, before anything starts,
    with the command to run."""
    wanted = os.environ.get(MODE_ENV, "").strip() or "auto"
    if wanted not in ("auto", "local", "container"):
        raise CannotStart(f"{MODE_ENV}={wanted!r}: expected local, container or auto")
    if wanted == "local":
        return Layout.local(), f"{MODE_ENV}=local"
    try:
        started = ensure_engine()
    except EngineError as exc:  # EngineMissing too: dockerd is not installed
        if wanted == "container":
            raise CannotStart(f"{MODE_ENV}=container, but {exc}; install a container engine "
                              f"(apt-get install docker.io) or run {MODE_ENV}=local make demo"
                              ) from None
        return Layout.local(), f"no container engine: {exc}"
    if started:
        record.dockerd_pid = our_pid()
        record.save()
    missing = container_needs()
    if missing is not None:
        if started:  # nothing will run in it
            stop_engine()
            record.dockerd_pid = None
            record.save()
        if wanted == "container":
            raise CannotStart(f"{MODE_ENV}=container, but {missing}")
        return Layout.local(), f"no container boxes: {missing}"
    if started:
        return Layout.container(), "started dockerd, stopped again by make demo-stop"
    return Layout.container(), "a container engine answers"


def bring_up(folder: Path, record: Record, progress: Progress) -> Summary:
    """The five steps, each with its progress line."""
    logs = folder / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    check_common_needs()
    layout, why = choose_layout(record)
    record.mode = layout.mode
    record.save()
    kind = "container boxes" if layout.mode == "container" else "local box processes"
    print(f"llmao demo: {kind} ({why})", flush=True)
    host = layout.llmao_host
    llmao_port = pick_port(host, template_port("server"))
    litellm_port = pick_port("127.0.0.1", template_port("litellm"))

    progress.step(1, "CAs, certificate and llmao-server over HTTPS")
    tls = make_server_tls(folder / "tls", layout.certificate_names, days=30,
                          ca_name="llmao demo CA")
    box_tls = make_fleet_ca(folder / "fleet-ca")
    fleet = write_demo_fleet(folder / "fleet", layout.boxes,
                             server_url=f"https://{host}:{llmao_port}",
                             litellm_url=f"http://127.0.0.1:{litellm_port}",
                             state=folder / "state.sqlite3", providers=layout.providers,
                             box_tls=box_tls)
    credentials = write_credential_files(folder, fleet, layout.boxes[0])
    keys = fleet.secrets
    litellm = launch_litellm(record, keys.master_key, litellm_port, logs)  # waited for at 3
    llmao_url = start_llmao(record, fleet, tls, host, llmao_port, logs)
    prometheus = write_prometheus_config(folder / "prometheus.yml", llmao_url, tls.ca_file,
                                         credentials.metrics_token, Path(box_tls["ca_cert"]))
    progress.done(llmao_url)

    progress.step(2, f"{len(layout.boxes)} boxes boot, pull their assignment and certificate")
    boot = BoxBoot(llmao_url, keys.fleet_key, tls.ca_file)
    reconcile_log = logs / "reconcile.log"

    def listed() -> None:  # a first pass, so that llmao knows where the provider lists them
        wait_litellm(litellm)
        run_pass(fleet.inventory_path, tls.ca_file, reconcile_log)

    urls = boot_boxes(fleet, boot, record, folder, layout.mode == "container", progress.add,
                      listed)
    add_box_token(credentials, box_token(layout.boxes[0], folder, record.containers
                                         if layout.mode == "container" else None))
    reach = (write_reach_inventory(folder / "fleet" / "reach.yml", record.containers)
             if layout.mode == "container" else None)
    progress.done()

    progress.step(3, "LiteLLM proxy (real, .venv-litellm)")
    wait_litellm(litellm)
    progress.done(litellm.url)

    progress.step(4, f"reconcile, once all {len(urls)} vLLM servers answer")
    wait_serving(urls, Path(box_tls["ca_cert"]))
    status = run_pass(fleet.inventory_path, tls.ca_file, reconcile_log)
    if status != 0:
        raise RuntimeError(f"reconcile failed (status {status}); see {shown(reconcile_log)}")
    routes = owned_routes(litellm.url, keys.master_key)
    every = interval_s()
    start_loop(record, fleet.inventory_path, tls.ca_file, reconcile_log, every)
    progress.done(f"{len(routes)} of {len(urls)} servers in LiteLLM; again every {every:g} s")

    progress.step(5, "a chat through LiteLLM")
    model = next(iter(fleet.load().servers())).model_name
    answer = chat(litellm.url, keys.master_key, model)
    answered_by = answer.removeprefix("answered by ").split(" port ")[0]
    progress.done(f"chat answered by {answered_by}")

    return Summary(
        mode=layout.mode, boxes=len(layout.boxes), servers=len(urls), every_s=every,
        answered_by=answered_by, model=model, llmao_url=llmao_url, litellm_url=litellm.url,
        ca_file=tls.ca_file, admin_token_file=credentials.admin_token,
        litellm_headers=credentials.litellm_headers, box_headers=credentials.box_headers,
        inventory=fleet.inventory_path, logs=logs, models_file=fleet.models_path,
        llmao_pid=next(entry.pid for entry in record.processes if entry.role == "llmao-server"),
        follow_s=ROLLOUT["follow_s"], prometheus_config=prometheus,
        prometheus_listen=f"127.0.0.1:{pick_port('127.0.0.1', PROMETHEUS_PORT)}",
        metrics_token_file=credentials.metrics_token, reach_inventory=reach,
        fleet_ca=Path(box_tls["ca_cert"]))


def start() -> int:
    folder = demo_dir()
    with locked(folder):
        previous = Record.load(folder / "pids.json")
        if previous is not None and running(previous):
            print("llmao demo is already running: nothing started (make demo-stop stops it)")
            print((folder / "summary.txt").read_text(), end="")
            return 0
        if previous is not None and previous.phase != "stopped":
            print("stopping what is left of an earlier demo", flush=True)
            stop_recorded(previous)
        clear(folder)
        record = Record(folder / "pids.json")
        record.save()
        progress = Progress()
        # Ctrl-C (even where the shell made a background job ignore it) and SIGTERM during
        # start-up both stop everything started so far.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            summary = bring_up(folder, record, progress)
        except CannotStart as exc:
            print(f"llmao demo cannot start: {exc}", file=sys.stderr, flush=True)
            stop_recorded(record)
            return 2
        except (KeyboardInterrupt, Exception) as exc:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut this
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            progress.end_line()
            reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"failed: {exc}"
            print(f"llmao demo {reason}", file=sys.stderr, flush=True)
            print("stopping everything it started ...", file=sys.stderr, flush=True)
            stop_recorded(record)
            print(f"stopped; logs are in {shown(folder / 'logs')}/", file=sys.stderr)
            return 130 if isinstance(exc, KeyboardInterrupt) else 1
        record.phase = "up"
        record.save()
        text = summary.text() + f"(up in {progress.total():.0f} s)\n"
        (folder / "summary.txt").write_text(text)
        print(text, end="")
        return 0


def stop() -> int:
    folder = demo_dir()
    if not (folder / "pids.json").exists():
        print("no llmao demo to stop")
        return 0
    with locked(folder):
        record = Record.load(folder / "pids.json")
        if record is None or record.phase == "stopped":
            print("the llmao demo is not running")
            return 0
        began = time.monotonic()
        stop_recorded(record)
        print(f"llmao demo stopped ({len(record.processes)} processes, "
              f"{len(record.containers)} containers) in {time.monotonic() - began:.1f} s")
    return 0
