"""ISA presets for the tests that inspect generated C or assembly.

Such a test names the target it expects and checks what that target implies (lanes, vector
registers, the register names in the assembly), parametrized over PRESETS so that both run on
any x86-64 host: code for a preset the host can execute (AVX2 code on an AVX-512 host) is
also run and compared with numpy; code for one it cannot is compiled and its assembly read.

    @ISA_PRESETS
    def test_x(target): ...           # target: Target("x86_64-avx2"), Target("x86_64-avx512")
"""
from __future__ import annotations

import pytest

from tessel.codegen.asm import hot_loop, spills, vector_fmas as fmas
from tessel.target import Target

PRESETS = ("x86_64-avx2", "x86_64-avx512")
HOST = Target("host")


def _preset(name: str):
    marks = () if HOST.arch == "x86_64" else (
        pytest.mark.skip(reason=f"{name} code needs an x86-64 compiler; this host is {HOST.arch}"),)
    return pytest.param(Target(name), marks=marks, id=name.removeprefix("x86_64-"))


ISA_PRESETS = pytest.mark.parametrize("target", [_preset(name) for name in PRESETS])


def runs_here(target: Target) -> bool:
    """Whether this host executes code compiled for `target` (same arch, every ISA feature)."""
    return target.arch == HOST.arch and target.features <= HOST.features


__all__ = ["HOST", "ISA_PRESETS", "PRESETS", "fmas", "hot_loop", "runs_here", "spills"]
