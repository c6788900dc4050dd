"""Compiler driver: C source -> cached shared library (or assembly text) with the target's compiler.

Libraries are cached by content under ``<cache_dir>/<key[:2]>/<key>.so`` next to the ``<key>.c``
they came from. A build writes a uniquely named temporary file in the same directory and
``os.replace``s it into place, so several processes may compile the same source at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tessel.errors import TesselError
from tessel.target import Target

_CACHE_FORMAT = "tessel-compile-v1"  # bump when the command line shape below changes
_LINK_LIBS = ("-lm",)
_ERROR_LINE = re.compile(r"(?:\.c|<stdin>):(\d+):(?:\d+:)?\s*(?:fatal\s+)?error", re.MULTILINE)
_MAX_SOURCE_LINES = 60  # sources longer than this are shown as excerpts in errors
_MAX_STDERR_CHARS = 8000


class CompileError(TesselError, RuntimeError):
    """The C compiler failed or timed out; ``source`` and ``stderr`` hold what it was given/said."""

    def __init__(self, message: str, *, source: str = "", stderr: str = "") -> None:
        super().__init__(message)
        self.source = source
        self.stderr = stderr


def default_cache_dir() -> Path:
    """$TESSEL_CACHE_DIR if set (read on every call), else ~/.cache/tessel/kernels."""
    env = os.environ.get("TESSEL_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "tessel" / "kernels"


def _key(source: str, target: Target, flags: tuple[str, ...]) -> str:
    parts = [_CACHE_FORMAT, source, target.compiler, target.compiler_version, list(flags)]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


# A compile that is not a search candidate's (a chosen program, a model's kernel, a test's)
# waits this long: on a loaded machine a 32x32 matmul once took more than a minute. The
# tuner's builder bounds each candidate itself (LocalBuilder.timeout_s).
COMPILE_TIMEOUT_S = 600.0


def compile_shared(source: str, target: Target, *, cache_dir: str | Path | None = None,
                   timeout_s: float = COMPILE_TIMEOUT_S,
                   extra_flags: tuple[str, ...] = ()) -> Path:
    """Compile C ``source`` into a shared library for ``target``; return the cached .so path."""
    libs = _LINK_LIBS + (("-lmvec",) if "_ZGV" in source else ())  # passes/vectorize.py
    return compile_cached(source, target, (*target.cflags, *extra_flags), libs, ".so",
                          cache_dir=cache_dir, timeout_s=timeout_s)


def compile_cached(source: str, target: Target, flags: tuple[str, ...], libs: tuple[str, ...],
                   suffix: str, *, cache_dir: str | Path | None = None,
                   timeout_s: float = COMPILE_TIMEOUT_S) -> Path:
    """Compile C ``source`` with ``target``'s compiler and ``flags`` (linking ``libs``) into a
    file ending in ``suffix`` (a library, a program), cached by content; return its path."""
    key = _key(source, target, flags)
    directory = (Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir())
    directory = directory / key[:2]
    out_path = directory / f"{key}{suffix}"
    if out_path.exists():
        return out_path
    directory.mkdir(parents=True, exist_ok=True)
    _sweep_stale(directory)
    c_path = directory / f"{key}.c"
    _write_atomic(c_path, source)
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f"{key}.", suffix=f"{suffix}.tmp")
    os.close(fd)
    _TEMPS.add(tmp_name)
    try:
        _run_checked([target.compiler, *flags, str(c_path), "-o", tmp_name, *libs], source,
                     timeout_s)
        os.chmod(tmp_name, 0o755)
        os.replace(tmp_name, out_path)
    finally:
        _TEMPS.discard(tmp_name)
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    return out_path


def link(inputs: list[str | Path], target: Target, out: str | Path, flags: tuple[str, ...],
         libs: tuple[str, ...] = (), timeout_s: float = COMPILE_TIMEOUT_S) -> Path:
    """Compile and link `inputs` (objects, C or assembly files) with ``target``'s compiler
    and `flags` into `out` (not cached: a model's export); CompileError if it fails."""
    cmd = [target.compiler, *flags, *map(str, inputs), "-o", str(out), *libs]
    _run_checked(cmd, f"(linking {len(inputs)} files)", timeout_s)
    return Path(out)


_STALE_TMP_S = 600.0  # a temporary file this old belongs to a build that was killed


def _sweep_stale(directory: Path) -> None:
    """Remove temporary files that killed builds left in a cache directory."""
    now = time.time()
    for path in directory.glob("*.tmp"):
        with contextlib.suppress(OSError):  # another process removed or replaced it
            if now - path.stat().st_mtime > _STALE_TMP_S:
                path.unlink()


def asm_for(source: str, target: Target, *, extra_flags: tuple[str, ...] = (),
            timeout_s: float = COMPILE_TIMEOUT_S) -> str:
    """The assembly the target's compiler emits for ``source`` (for checking SIMD/FMA use)."""
    flags = [flag for flag in target.cflags if flag != "-shared"]
    cmd = [target.compiler, *flags, *extra_flags, "-S", "-o", "-", "-x", "c", "-"]
    return _run_checked(cmd, source, timeout_s, stdin=source)


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as file:
            file.write(text)
        os.replace(tmp_name, path)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)


def _run_checked(cmd: list[str], source: str, timeout_s: float, stdin: str | None = None) -> str:
    """Run the compiler; return its stdout or raise CompileError (failure, timeout, no compiler)."""
    try:
        returncode, stdout, stderr = _run(cmd, timeout_s, stdin)
    except subprocess.TimeoutExpired as err:
        raise CompileError(f"compilation timed out after {timeout_s:g} s: {shlex.join(cmd)}",
                           source=source) from err
    except OSError as err:
        raise CompileError(f"cannot run compiler: {shlex.join(cmd)}: {err}", source=source) from err
    if returncode != 0:
        raise CompileError(_failure_message(cmd, returncode, source, stderr),
                           source=source, stderr=stderr)
    return stdout


_RUNNING: set[int] = set()  # process groups of the compilers running in this process
_TEMPS: set[str] = set()  # their output files, removed if they are killed


def _run(cmd: list[str], timeout_s: float, stdin: str | None) -> tuple[int, str, str]:
    """subprocess.run, except that the compiler runs in a process group of its own, killed
    whole (cc1, as, ld too) at the timeout or when anything interrupts the wait."""
    with subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        _RUNNING.add(proc.pid)
        try:
            stdout, stderr = proc.communicate(stdin, timeout=timeout_s)
        except BaseException:  # the timeout, Ctrl-C, a signal handler's exception
            _killpg(proc.pid)
            proc.communicate()
            raise
        finally:
            _RUNNING.discard(proc.pid)
    return proc.returncode, stdout, stderr


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def kill_compilers() -> None:
    """Kill every compiler this process is running, with its children, and remove their
    output files (the build workers call this when they are told to stop, so no cc1 outlives
    them and no .so.tmp is left in the cache)."""
    for pgid in list(_RUNNING):
        _killpg(pgid)
    for name in list(_TEMPS):
        with contextlib.suppress(OSError):
            os.unlink(name)


def _failure_message(cmd: list[str], returncode: int, source: str, stderr: str) -> str:
    shown_stderr = stderr if len(stderr) <= _MAX_STDERR_CHARS else (
        stderr[:_MAX_STDERR_CHARS] + f"\n... ({len(stderr) - _MAX_STDERR_CHARS} more chars)")
    match = _ERROR_LINE.search(stderr)
    error_line = int(match.group(1)) if match else None
    return (f"C compilation failed (exit {returncode}): {shlex.join(cmd)}\n"
            f"--- compiler stderr ---\n{shown_stderr.rstrip()}\n"
            f"--- source ---\n{source_excerpt(source, error_line)}")


def source_excerpt(source: str, error_line: int | None = None, context: int = 10) -> str:
    """Numbered source lines, '>' marking ``error_line``; long sources show the head and the
    lines around ``error_line`` only."""
    lines = source.splitlines()
    shown = set(range(1, len(lines) + 1))
    if len(lines) > _MAX_SOURCE_LINES:
        shown = set(range(1, context + 1))
        if error_line is not None:
            first, last = max(1, error_line - context), min(len(lines), error_line + context)
            shown |= set(range(first, last + 1))
    out: list[str] = []
    for number in sorted(shown):
        if out and number - 1 not in shown:
            out.append("     ...")
        mark = ">" if number == error_line else " "
        out.append(f"{mark}{number:5d} | {lines[number - 1]}")
    if lines and len(lines) not in shown:
        out.append(f"     ... ({len(lines)} lines in all)")
    return "\n".join(out)
