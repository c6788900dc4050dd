"""A search process: makes programs for `SearchWorkers` (tessel.search.workers).

Started as ``python -m tessel.search.worker <parent pid>`` (tessel.measure.child): it never
imports the user's ``__main__`` and dies with the tuner.

Request: {"key": str, "proposer": bytes (a pickled tessel.search.base.Proposer), "jobs":
[Job, ...]}; reply: [Proposal | None, ...], one per job, or {"error": "exception", "msg":
the traceback} when making one raised (the tuner then makes the chunk itself and sees the
error), {"error": "proposer", ...} when the Proposer does not unpickle here (a class of the
user's ``__main__``: the tuner makes that strategy's programs itself). The Proposers of the
last KEEP keys stay unpickled, with their spaces' caches.
"""
from __future__ import annotations

import pickle
import sys
import traceback
from collections import OrderedDict
from typing import Any

from tessel.measure.child import serve
from tessel.search.base import Proposer

KEEP = 4  # strategies whose Proposer (and its space's caches) a process keeps
_proposers: OrderedDict[str, Proposer] = OrderedDict()


def handle(request: dict) -> Any:
    try:
        proposer = _proposer(request["key"], request["proposer"])
    except Exception:  # noqa: BLE001 - e.g. a space class the user's __main__ defines
        return {"error": "proposer", "msg": traceback.format_exc(limit=-4)}
    try:
        return [proposer.make(job) for job in request["jobs"]]
    except Exception:  # noqa: BLE001 - the tuner makes the chunk again and sees the error
        return {"error": "exception", "msg": traceback.format_exc(limit=-8)}


def _proposer(key: str, blob: bytes) -> Proposer:
    if key in _proposers:
        _proposers.move_to_end(key)
    else:
        _proposers[key] = pickle.loads(blob)
        while len(_proposers) > KEEP:
            _proposers.popitem(last=False)
    return _proposers[key]


if __name__ == "__main__":
    sys.exit(serve(handle))
