"""A build process: candidate programs -> compiled shared libraries, for `LocalBuilder`.

Started as ``python -m tessel.measure.build_worker <parent pid>`` (tessel.measure.child): it
never imports the user's ``__main__``. Told to stop (SIGTERM from `LocalBuilder.close`, or
from the kernel when the tuner dies, through PR_SET_PDEATHSIG) it kills the compilers it is
running, with their cc1/as/ld children, before it exits.

Request: {"func": PrimFunc, "target": Target, "cache_dir": str | None, "timeout_s": float,
"max_source_chars": int | None}; reply: a tessel.measure.builder.BuildResult. With
"prebuild": True, the program as tessel.codegen.build builds it, left in the caches; reply:
"", or the error's line (LocalBuilder.prebuild).
"""
from __future__ import annotations

import os
import signal
import sys
from typing import Any

from tessel.codegen.compiler import kill_compilers
from tessel.measure.builder import build_artifact, prebuild_one
from tessel.measure.child import serve


def handle(request: dict) -> Any:
    if request.get("prebuild"):
        return prebuild_one(request["func"], request["target"], request["cache_dir"])
    return build_artifact(request["func"], request["target"], cache_dir=request["cache_dir"],
                          timeout_s=request["timeout_s"],
                          max_source_chars=request["max_source_chars"])


def _stop(signum: int, frame: Any) -> None:
    kill_compilers()
    os._exit(128 + signum)


def main() -> None:
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    serve(handle, death_signal=signal.SIGTERM)


if __name__ == "__main__":
    sys.exit(main())
