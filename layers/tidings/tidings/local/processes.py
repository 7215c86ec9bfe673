"""What the local runtime's child processes (the queue server, sender environments) share: how
they are started, and that they end with the runtime, even when it is killed."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Callable
from multiprocessing.connection import wait

# Spawned, not forked: nothing of the runtime's threads, locks or connections is copied into a
# child, which imports what it needs afresh, as a new Lambda execution environment does.
SPAWN = multiprocessing.get_context("spawn")


def end_with_parent(on_parent_gone: Callable[[], None] | None = None) -> None:
    """Exit this process as soon as the one that started it is gone, even killed (when nothing
    of its shutdown runs): what the runtime started lives only as long as the runtime.
    ``on_parent_gone`` runs first (what the parent would have cleaned up)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        if on_parent_gone is not None:
            on_parent_gone()
        os._exit(0)

    threading.Thread(target=watch, name="tidings-parent-watch", daemon=True).start()


def ignore_group_signals() -> None:
    """Leave to the runtime when this child stops: Ctrl-C, a closed terminal or a service
    manager signal every process of the group at once, and a child that ended then would have
    nothing drained. The runtime stops its children itself, and they end when it is gone."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
