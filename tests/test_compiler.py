import ctypes
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tessel.codegen import compiler
from tessel.codegen.compiler import CompileError, asm_for, compile_shared, source_excerpt
from tessel.target import Target

ADD = "int add(int a, int b) { return a + b; }\n"

OPENMP = """
#include <omp.h>
int max_threads(void) { return omp_get_max_threads(); }
double parallel_sum(const double *x, int n) {
    double s = 0.0;
    #pragma omp parallel for reduction(+:s)
    for (int i = 0; i < n; i++) s += x[i];
    return s;
}
"""

FMA_LOOP = """
void fma_loop(float *restrict c, const float *restrict a, const float *restrict b, int n) {
    for (int i = 0; i < n; i++) c[i] += a[i] * b[i];
}
"""


def _add(lib_path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(lib_path))
    lib.add.argtypes = (ctypes.c_int, ctypes.c_int)
    lib.add.restype = ctypes.c_int
    return lib


def test_compile_load_and_call(tmp_path):
    path = compile_shared(ADD, Target(), cache_dir=tmp_path)
    assert path.suffix == ".so" and path.parent.parent == tmp_path
    assert path.parent.name == path.stem[:2]
    assert _add(path).add(40, 2) == 42
    assert path.with_suffix(".c").read_text() == ADD
    assert sorted(p.name for p in path.parent.iterdir()) == [path.stem + ".c", path.name]


def test_second_compile_hits_cache_without_compiler(tmp_path, monkeypatch):
    target = Target()
    first = compile_shared(ADD, target, cache_dir=tmp_path)
    mtime = first.stat().st_mtime_ns

    def no_compiler(*args, **kwargs):
        raise AssertionError("the compiler must not run on a cache hit")

    monkeypatch.setattr(compiler.subprocess, "Popen", no_compiler)
    assert compile_shared(ADD, target, cache_dir=str(tmp_path)) == first
    assert first.stat().st_mtime_ns == mtime


def test_cache_dir_from_environment_read_at_call_time(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSEL_CACHE_DIR", str(tmp_path / "from-env"))
    path = compile_shared(ADD, Target())
    assert (tmp_path / "from-env") in path.parents


def test_flags_and_targets_key_the_cache(tmp_path):
    host = Target()
    base = compile_shared(ADD, host, cache_dir=tmp_path)
    other_flags = compile_shared(ADD, host, cache_dir=tmp_path, extra_flags=("-O1",))
    other_target = compile_shared(ADD, Target("host", cflags=("-O2", "-fPIC", "-shared")),
                                  cache_dir=tmp_path)
    other_source = compile_shared(ADD + "\n", host, cache_dir=tmp_path)
    assert len({base, other_flags, other_target, other_source}) == 4
    assert _add(other_flags).add(1, 2) == 3 and _add(other_target).add(-1, 1) == 0


def test_syntax_error_reports_command_stderr_and_line(tmp_path):
    source = "int ok(void) { return 1; }\nint broken(int a) { return a + ; }\n"
    with pytest.raises(CompileError) as info:
        compile_shared(source, Target(), cache_dir=tmp_path)
    message = str(info.value)
    assert "error" in info.value.stderr and info.value.source == source
    assert "expected expression" in message  # gcc's and clang's wording
    assert Target().compiler in message and "-shared" in message
    assert ">    2 | int broken(int a) { return a + ; }" in message
    leftovers = [p.name for p in tmp_path.rglob("*") if p.is_file()]
    assert len(leftovers) == 1 and leftovers[0].endswith(".c")  # no .so, no temp files


def test_error_excerpt_of_long_source_shows_head_and_error_context(tmp_path):
    body = "".join(f"int f{i}(void) {{ return {i}; }}\n" for i in range(300))
    source = body.replace("return 150;", "return 150 +;")
    with pytest.raises(CompileError) as info:
        compile_shared(source, Target(), cache_dir=tmp_path)
    message = str(info.value)
    assert ">  151 | int f150(void) { return 150 +; }" in message
    assert "    1 | int f0(void)" in message and "  141 | " in message and "  161 | " in message
    assert "  100 | " not in message and "(300 lines in all)" in message


def test_source_excerpt_short_source_is_complete():
    text = source_excerpt("a\nb\nc", error_line=2)
    assert text.splitlines() == ["     1 | a", ">    2 | b", "     3 | c"]


def test_timeout_kills_compiler_and_raises(tmp_path):
    slow = tmp_path / "slowcc"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    target = Target("host", compiler=str(slow), compiler_version="slowcc 1.0")
    start = time.monotonic()
    with pytest.raises(CompileError, match=r"timed out after 0\.5 s"):
        compile_shared(ADD, target, cache_dir=tmp_path / "cache", timeout_s=0.5)
    assert time.monotonic() - start < 10
    leftovers = [p.name for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert len(leftovers) == 1 and leftovers[0].endswith(".c")


def test_openmp_compiles_and_runs(tmp_path):
    lib = ctypes.CDLL(str(compile_shared(OPENMP, Target(), cache_dir=tmp_path)))
    lib.max_threads.restype = ctypes.c_int
    lib.parallel_sum.restype = ctypes.c_double
    lib.parallel_sum.argtypes = (ctypes.c_void_p, ctypes.c_int)
    x = np.arange(10_000, dtype=np.float64)
    assert lib.max_threads() >= 1
    assert lib.parallel_sum(x.ctypes.data, x.size) == float(x.sum())


def _compile_add(cache_dir: str) -> str:
    return str(compile_shared(ADD, Target(), cache_dir=cache_dir))


def test_concurrent_compiles_from_processes_agree(tmp_path):
    with ProcessPoolExecutor(max_workers=4) as pool:
        paths = list(pool.map(_compile_add, [str(tmp_path)] * 8))
    assert len(set(paths)) == 1
    assert _add(paths[0]).add(2, 3) == 5
    names = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert len(names) == 2 and names[0].endswith(".c") and names[1].endswith(".so")


def test_asm_for_shows_fma_and_256_bit_vectors():
    target = Target()
    asm = asm_for(FMA_LOOP, target)
    assert "fma_loop" in asm
    if target.arch == "x86_64" and target.has("fma"):
        assert "vfmadd" in asm
    if target.arch == "x86_64" and target.has("avx2"):
        assert "%ymm" in asm


def test_asm_for_reports_errors():
    with pytest.raises(CompileError, match=r">    1 \| void f\(void\) \{ return 1 \}"):
        asm_for("void f(void) { return 1 }\n", Target())


def test_missing_compiler_raises_compile_error(tmp_path):
    target = Target("host", compiler=str(tmp_path / "nope"), compiler_version="nope 0")
    with pytest.raises(CompileError, match="cannot run compiler"):
        compile_shared(ADD, target, cache_dir=tmp_path)


def test_default_cache_dir_is_under_home(monkeypatch):
    monkeypatch.delenv("TESSEL_CACHE_DIR", raising=False)
    assert compiler.default_cache_dir() == Path.home() / ".cache" / "tessel" / "kernels"
