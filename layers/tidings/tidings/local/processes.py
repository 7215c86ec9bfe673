"""What the local runtime's child processes (the queue server, sender environments) share: how
they are started, and that they end with the runtime, even when it is killed."""

from __future__ import annotations

import multiprocessing
import os
import threading
from multiprocessing.connection import wait

# Spawned, not forked: nothing of the runtime's threads, locks or connections is copied into a
# child, which imports what it needs afresh, as a new Lambda execution environment does.
SPAWN = multiprocessing.get_context("spawn")


def end_with_parent() -> None:
    """Exit this process as soon as the one that started it is gone, even killed (when nothing
    of its shutdown runs): what the runtime started lives only as long as the runtime."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os._exit(0)

    threading.Thread(target=watch, name="tidings-parent-watch", daemon=True).start()
