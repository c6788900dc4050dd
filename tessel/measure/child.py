"""The child side of tessel's worker processes (the measuring worker, the build workers).

A worker is started as ``python -m <module> <parent pid>`` in a session of its own, so it
never runs the user's ``__main__`` (a script without a main guard is safe) and a Ctrl-C in
the terminal reaches only the tuner, which stops its workers itself. It reads length-prefixed
pickled requests on stdin and answers on stdout, and it dies with its parent (Linux
PR_SET_PDEATHSIG): a tuner killed with SIGKILL leaves no worker behind.
"""
from __future__ import annotations

import ctypes
import os
import pickle
import signal
import struct
import sys
import threading
from typing import Any, BinaryIO, Callable

_HEADER = struct.Struct("<Q")
_PR_SET_PDEATHSIG = 1


def write_message(stream: BinaryIO, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def read_message(stream: BinaryIO) -> Any | None:
    """The next message, or None at end of input."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    return pickle.loads(stream.read(size))


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """Linux: receive `sig` when the parent dies (exit at once if it already has). Elsewhere
    a no-op: the parent's close() is then the only way the worker ends."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def serve(handle: Callable[[Any], Any], death_signal: int = signal.SIGKILL,
          bind: Callable[[Callable[[Any], None]], None] | None = None) -> None:
    """Answer requests from stdin on stdout until stdin closes. Whatever the code run here
    prints to stdout goes to stderr instead, so it cannot corrupt the replies.

    `bind`, if given, first receives the function that sends a reply, for a handler whose
    reply may come from another thread (the measuring worker's watchdog answers for a kernel
    call that will not end); a handler that has answered that way returns None."""
    if len(sys.argv) > 1:
        die_with_parent(int(sys.argv[1]), death_signal)
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    lock = threading.Lock()

    def send(message: Any) -> None:
        with lock:
            write_message(replies, message)

    if bind is not None:
        bind(send)
    while (request := read_message(requests)) is not None:
        reply = handle(request)
        if reply is not None:
            send(reply)


__all__ = ["die_with_parent", "read_message", "serve", "write_message"]
