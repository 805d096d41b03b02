"""The worker's delayed call (:func:`llmao_server.worker.after`), which gathers access lines."""

from __future__ import annotations

import sys

import gevent
import greenlet

from llmao_server.worker import after
from rig.processes import run_forked


def called_late_in_the_hub() -> None:
    """Exit 0 when ``after`` ran its call once, no sooner than asked, in the event loop's own
    greenlet (no greenlet was made for it), while this greenlet slept."""
    calls: list[tuple[float, greenlet.greenlet]] = []
    hub = gevent.get_hub()
    began = hub.loop.now()
    after(0.05, lambda: calls.append((hub.loop.now() - began, greenlet.getcurrent())))
    gevent.sleep(0.01)
    early = list(calls)
    gevent.sleep(0.2)
    sys.exit(0 if not early and len(calls) == 1 and calls[0][0] >= 0.04
             and calls[0][1] is hub else 1)


def test_a_delayed_call_runs_once_in_the_event_loop_not_a_greenlet_of_its_own() -> None:
    assert run_forked(called_late_in_the_hub, [()], timeout=30) == [0]
