import dataclasses
import json
import pickle
from pathlib import Path

import pytest

from tessel.target import VALID_TARGETS, Target, TargetError, _parse_cpuinfo, _read_caches


def test_host_detection_is_sane():
    t = Target()
    assert t == Target("host")
    assert t.name == "host"
    assert t.arch in {"x86_64", "aarch64"}
    assert t.vector_bits in {128, 256, 512}
    assert t.cores >= 1
    assert t.l1d_bytes > 0 and t.l2_bytes > 0 and t.l3_bytes > 0
    assert t.l1d_bytes <= t.l2_bytes <= t.l3_bytes
    assert Path(t.compiler).is_file()
    assert t.compiler_version
    if t.has("avx2"):
        assert t.vector_bits >= 256
    if t.has("avx512f"):
        assert t.vector_bits == 512


def test_host_cflags_are_native_and_ieee_safe():
    t = Target()
    assert t.cflags[0] == "-O3"
    assert "-march=native" in t.cflags or "-mcpu=native" in t.cflags
    for flag in ("-fPIC", "-shared", "-fopenmp", "-fno-math-errno", "-ffp-contract=fast"):
        assert flag in t.cflags
    assert "-ffast-math" not in t.cflags
    assert isinstance(t.features, frozenset) and isinstance(t.cflags, tuple)


def test_presets():
    avx2 = Target("x86_64-avx2")
    assert (avx2.arch, avx2.vector_bits, avx2.cores) == ("x86_64", 256, 1)
    assert avx2.has("fma") and not avx2.has("avx512f")
    assert "-mavx2" in avx2.cflags and "-mfma" in avx2.cflags
    assert "-march=native" not in avx2.cflags
    avx512 = Target("x86_64-avx512")
    assert avx512.vector_bits == 512 and avx512.has("avx512bw") and "-mavx512f" in avx512.cflags
    assert Target("x86_64-sse").vector_bits == 128
    neon = Target("aarch64-neon")
    assert (neon.arch, neon.vector_bits) == ("aarch64", 128)
    assert neon.has("neon") and neon.has("asimd")
    assert set(VALID_TARGETS) == {"host", "x86_64-sse", "x86_64-avx2", "x86_64-avx512",
                                  "aarch64-neon"}


def test_keyword_overrides():
    host = Target()
    one = Target("host", cores=1)
    assert one.cores == 1 and one.arch == host.arch and one.features == host.features
    flags = ("-O2", "-fPIC", "-shared")
    assert Target("host", cflags=list(flags)).cflags == flags
    assert Target("x86_64-avx2", cores=8).cores == 8
    narrowed = Target("host", features={"sse2", "sse4_2"})
    assert narrowed.vector_bits == 128  # derived from the overridden features
    assert Target("host", compiler="gcc").compiler.endswith("gcc")


def test_vector_lanes():
    avx2 = Target("x86_64-avx2")
    assert avx2.vector_lanes("float32") == 8
    assert avx2.vector_lanes("float64") == 4
    assert avx2.vector_lanes("int8") == 32
    assert avx2.vector_lanes("float16") == 16
    assert Target("x86_64-avx512").vector_lanes("float32") == 16
    assert Target("aarch64-neon").vector_lanes("int32") == 4


@pytest.mark.parametrize("name, registers, accumulators", [
    ("x86_64-sse", 16, 12), ("x86_64-avx2", 16, 12), ("x86_64-avx512", 32, 24),
    ("aarch64-neon", 32, 24),
])
def test_vector_registers_follow_the_isa(name, registers, accumulators):
    target = Target(name)
    assert target.vector_registers == registers
    assert target.accumulator_registers == accumulators
    assert Target(name, vector_registers=8).accumulator_registers == 6
    assert Target.from_json(target.to_json()).vector_registers == registers


def test_host_registers_match_its_features():
    host = Target("host")
    wide = host.has("avx512f") or host.arch == "aarch64"
    assert host.vector_registers == (32 if wide else 16)
    # derived from the ISA, like vector_bits: the fingerprint already names it
    assert "vector_registers" not in host.fingerprint()


@pytest.mark.parametrize("make, bad", [
    (lambda: Target("x86_64-avx3"), "x86_64-avx3"),
    (lambda: Target("x86_64-avx2").vector_lanes("float8"), "float8"),
    (lambda: Target("host", cores=0), "cores must be a positive integer, got 0"),
    (lambda: Target("host", cores=2.5), "got 2.5"),
    (lambda: Target("host", l2_bytes=-1), "l2_bytes must be a positive integer, got -1"),
    (lambda: Target("host", vector_bits=100), "got 100"),
    (lambda: Target("host", vector_registers=0), "vector_registers must be a positive integer"),
    (lambda: Target("host", cflags="-O3 -march=native"), "-O3 -march=native"),
    (lambda: Target("host", compiler="no-such-cc-xyz"), "no-such-cc-xyz"),
    (lambda: Target("host", threads=4), "threads"),
    (lambda: Target.from_json("{not json"), "invalid Target JSON"),
])
def test_bad_values_raise_target_error_naming_them(make, bad):
    with pytest.raises(TargetError) as info:
        make()
    assert bad in str(info.value)


def test_unknown_target_lists_valid_ones():
    with pytest.raises(TargetError, match="x86_64-avx2") as info:
        Target("pentium")
    assert "pentium" in str(info.value)


def test_fingerprint_is_stable_and_json_round_trips():
    t = Target()
    fp = t.fingerprint()
    assert json.loads(json.dumps(fp)) == fp
    assert fp["features"] == sorted(t.features)
    assert set(fp) == {"arch", "cpu_model", "features", "vector_bits", "cores",
                       "compiler_version", "cflags"}
    assert t.fingerprint_hash() == Target().fingerprint_hash()
    assert len(t.fingerprint_hash()) == 16 and int(t.fingerprint_hash(), 16) >= 0
    assert Target("host", cores=t.cores + 1).fingerprint_hash() != t.fingerprint_hash()
    for name in VALID_TARGETS:
        target = Target(name, cores=3)
        again = Target.from_json(target.to_json())
        assert again == target and hash(again) == hash(target)
        assert again.fingerprint_hash() == target.fingerprint_hash()


def test_from_json_keeps_foreign_compiler_without_probing():
    data = json.loads(Target("x86_64-avx512").to_json())
    data.update(compiler="/opt/elsewhere/bin/gcc", compiler_version="gcc (GCC) 14.1.0")
    t = Target.from_json(json.dumps(data))
    assert t.compiler == "/opt/elsewhere/bin/gcc"
    assert "gcc 14.1.0" in str(t)


def test_hashable_frozen_and_picklable():
    t = Target()
    assert {t: 1}[Target("host")] == 1
    assert len({t, Target("host"), Target("x86_64-avx2")}) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.cores = 5
    assert pickle.loads(pickle.dumps(t)) == t
    assert dataclasses.replace(t, cores=1).cores == 1


def test_str_is_readable():
    text = str(Target("x86_64-avx2", cores=2))
    assert text.startswith("x86_64 avx2+fma 256-bit x2 cores (")
    assert str(Target("aarch64-neon")).startswith("aarch64 neon 128-bit x1 core (")


def test_has_accepts_aliases():
    t = Target("host", features={"sse2", "avx512f", "avx512_vnni"})
    assert t.has("avx512vnni") and t.has("AVX512_VNNI") and t.has("avx512")
    assert not t.has("avx2")


def test_parse_cpuinfo_x86_and_aarch64():
    x86 = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx avx2 fma pni\n" \
          "processor\t: 1\nmodel name\t: other\nflags\t\t: fpu\n"
    assert _parse_cpuinfo(x86) == ("AMD EPYC 7B13", frozenset({"sse2", "avx", "avx2", "fma"}))
    arm = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes sve asimddp\n"
    model, features = _parse_cpuinfo(arm)
    assert model == "" and features == {"asimd", "neon", "sve", "asimddp"}


def test_read_caches_from_sysfs_tree(tmp_path):
    for index, (level, kind, size) in enumerate(
            [("1", "Data", "48K"), ("1", "Instruction", "32K"), ("2", "Unified", "2048K"),
             ("3", "Unified", "30M")]):
        d = tmp_path / f"index{index}"
        d.mkdir()
        for name, value in (("level", level), ("type", kind), ("size", size)):
            (d / name).write_text(value + "\n")
    assert _read_caches(tmp_path) == (48 << 10, 2 << 20, 30 << 20)
    assert _read_caches(tmp_path / "missing") == (32 << 10, 1 << 20, 8 << 20)
