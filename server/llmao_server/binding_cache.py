"""Every box binding (:mod:`.boxes.bindings`), in each worker's memory: no fetch reads the store.

A background thread per worker reads only the bindings changed since its last
look (each change takes the next ``seq`` in the store), so a binding made,
confirmed or released by any worker or instance reaches every other within
:data:`REFRESH_INTERVAL_S`. What the memory cannot confirm is decided against the
store by the caller, so a stale memory delays nothing but a release.

A confirmed box presents the same token on every call, and a boot storm is
nothing but such calls: once a token has been checked against its binding's
hash, the worker remembers it with that binding, so the next call is admitted
by one dictionary lookup. Keyed by the token itself, the lookup compares a
presented value only with a remembered one of the same (keyed, random) hash,
so its time says nothing of a token; a binding that changes (released, bound
again) forgets the token remembered for it.
"""

from __future__ import annotations

import logging
import threading

from .process_id import pid
from .store import BoxBinding, StateStore

REFRESH_INTERVAL_S = 1.0

log = logging.getLogger(__name__)


class BindingCache:
    """This worker's copy of every binding, refreshed from the store as it changes."""

    def __init__(self, store: StateStore, interval_s: float = REFRESH_INTERVAL_S):
        self.store = store
        self.interval_s = interval_s
        self._bindings: dict[str, BoxBinding] = {}
        # Tokens checked against a confirmed binding held: token -> that binding, and the
        # token of each box, to forget it when the box's binding changes.
        self._admitted: dict[str, BoxBinding] = {}
        self._token_of: dict[str, str] = {}
        self._seq = 0
        self._lock = threading.Lock()
        self._refresher_pid: int | None = None
        self._stop = threading.Event()
        self._failing = False

    def held(self, box: str) -> BoxBinding | None:
        """The binding of ``box`` as this worker last saw it (no store read)."""
        if self._refresher_pid != pid():
            self._start()
        return self._bindings.get(box)

    def admits(self, box: str, presented: str) -> bool:
        """Whether ``presented`` was checked against the confirmed binding of ``box`` that
        this worker holds now (:meth:`admit`): one dictionary lookup, no store read."""
        binding = self._admitted.get(presented)
        return (binding is not None and binding is self._bindings.get(box)
                and self._refresher_pid == pid())

    def admit(self, box: str, presented: str, binding: BoxBinding) -> None:
        """Remember ``presented``, checked against ``binding``: the confirmed binding of
        ``box`` held now (as :meth:`held` answered)."""
        with self._lock:
            if self._bindings.get(box) is binding and binding.confirmed:
                self._forget_token(box)
                self._admitted[presented] = binding
                self._token_of[box] = presented

    def refresh(self) -> None:
        """Read what changed since the last look (raises :class:`StoreError`)."""
        with self._lock:
            changed = self.store.bindings_since(self._seq)
            for binding in changed:
                self._bindings[binding.box] = binding
                self._forget_token(binding.box)
                self._seq = max(self._seq, binding.seq)

    def _forget_token(self, box: str) -> None:
        token = self._token_of.pop(box, None)
        if token is not None:
            self._admitted.pop(token, None)

    def _start(self) -> None:
        """Load and start refreshing in this process (a forked worker inherits no thread)."""
        with self._lock:
            if self._refresher_pid == pid():
                return
            self._refresher_pid = pid()
            self._stop = threading.Event()
        self.refresh_quietly()
        threading.Thread(target=self._run, args=(self._stop,), name="llmao-binding-refresh",
                         daemon=True).start()

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval_s):
            self.refresh_quietly()

    def close(self) -> None:
        """Stop this process's refresher (the app is closing)."""
        self._stop.set()
        self._refresher_pid = None

    def refresh_quietly(self) -> None:
        """A refresh whose failure keeps what is held (the store is down): the memory then
        decides, and a presented token it cannot confirm was refused by the attempt count."""
        try:
            self.refresh()
        except Exception as exc:  # any fault: the next round retries; one line per streak
            if not self._failing:
                log.warning("cannot read box bindings from the state store (%s); the ones "
                            "held are kept and doubtful calls ask the store",
                            type(exc).__name__)
            self._failing = True
            return
        self._failing = False
