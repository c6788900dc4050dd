import dataclasses
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tessel import target as target_module
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


def test_portable_flags_name_the_features_instead_of_this_cpu():
    """What an exported library is compiled with (tessel.graph.export): the target's features
    each named, no -march=native (it would use whatever else this CPU has), the rest as is."""
    for t in (Target("x86_64-avx2"), Target("x86_64-avx512"), Target("aarch64-neon")):
        flags = t.portable_cflags
        assert not any(f.endswith("=native") for f in flags if f != "-mtune=native")
        assert len(flags) == len(set(flags)) and flags[0] == "-O3"
        assert {"-fPIC", "-fopenmp", "-ffp-contract=fast"} <= set(flags)
        assert {f"-m{name}" for name in t.feature_flags} <= set(flags)
    avx2 = Target("x86_64-avx2")
    assert avx2.feature_flags == ("avx", "avx2", "f16c", "fma", "sse2", "sse4.1", "sse4.2")
    assert "-march=x86-64" in avx2.portable_cflags
    assert "-mprefer-vector-width=512" in Target("x86_64-avx512").portable_cflags
    assert Target("aarch64-neon").feature_flags == ()
    host = Target()
    if host.arch == "x86_64":
        assert "-march=native" not in host.portable_cflags
        # tuned for this machine still, or generically where GCC's own tuning for it is off
        assert ("-mtune=native" in host.portable_cflags) != ("-mtune=generic" in host.cflags)


@pytest.mark.parametrize("tune, expected", [("znver3", ("-mtune=generic",)), ("znver1", (
    "-mtune=generic",)), ("sapphirerapids", ()), ("haswell", ()), ("", ())])
def test_host_flags_tune_generically_where_gccs_zen_tables_are_off(monkeypatch, tune, expected):
    """-march=native tuned for a Zen core folds a register tile's vector loads into its FMAs
    (a 4 x 16 AVX2 tile at half speed on a Zen 3): there the host's flags add -mtune=generic,
    which its exported library keeps; elsewhere they are -march=native alone and the export is
    tuned for this machine. Presets and clang are left as they were."""
    monkeypatch.setattr(target_module, "_host", lambda: (AVX2_HOST, ("-march=native",)))
    monkeypatch.setattr(target_module, "_native_tune", lambda compiler: tune)
    gcc = "cc (Debian 12.2.0-14+deb12u1) 12.2.0"
    host = Target("host", compiler="/usr/bin/cc", compiler_version=gcc)
    assert tuple(f for f in host.cflags if f.startswith("-mtune=")) == expected
    assert host.cflags[:2] == ("-O3", "-march=native")
    portable = [f for f in host.portable_cflags if f.startswith("-mtune=")]
    assert portable == (["-mtune=generic"] if expected else ["-mtune=native"])
    clang = Target("host", compiler="/usr/bin/cc", compiler_version="clang version 16.0.6")
    assert not any(f.startswith("-mtune=") for f in clang.cflags)
    assert not any(f.startswith("-mtune=") for f in Target("x86_64-avx2").cflags)


def test_the_native_tuning_is_read_from_the_compiler():
    """What GCC's -march=native tunes for, asked of the compiler itself: a name on an x86-64
    host with GCC; "" for a compiler that cannot be run."""
    host = Target()
    if host.arch == "x86_64" and not host.compiler_version.startswith("clang"):
        assert re.fullmatch(r"[a-z0-9-]+", target_module._native_tune(host.compiler))
    assert target_module._native_tune("/nonexistent/cc") == ""


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


def test_features_are_canonical_and_unknown_ones_refused():
    assert Target("host", features={"AVX512", "avx2"}).features == {"avx512f", "avx2"}
    with pytest.raises(TargetError, match="unknown x86_64 feature.*avx1024; known: "):
        Target("x86_64-avx2", features={"avx2", "avx1024"})
    with pytest.raises(TargetError, match="unknown aarch64 feature.*avx2"):
        Target("aarch64-neon", features={"neon", "avx2"})


AVX2_HOST = dict(arch="x86_64", cpu_model="An AVX2 CPU", features=frozenset(
    {"sse2", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c"}), cores=2, l1d_bytes=32768,
    l2_bytes=524288, l3_bytes=33554432)


@pytest.fixture
def avx2_host(monkeypatch):
    """This process sees an AVX2-only x86-64 host (a Zen 3), whatever the machine is."""
    monkeypatch.setattr(target_module, "_host", lambda: (AVX2_HOST, ("-march=native",)))


def test_code_the_host_cannot_run_is_refused_before_it_loads(avx2_host):
    """Calling AVX-512 code on an AVX2 CPU killed the process with SIGILL: the module now
    refuses to load, naming what the host lacks; so does a runner measuring for that target."""
    from tessel import build, ops
    from tessel.measure import LocalRunner
    avx512 = Target("x86_64-avx512")
    assert "avx512f" in avx512.host_gap() and "An AVX2 CPU" in avx512.host_gap()
    assert Target("x86_64-avx2").host_gap() == "" and Target("host").host_gap() == ""
    assert Target("aarch64-neon").host_gap() == "this host is x86_64, not aarch64"
    if Target("host").arch != "x86_64":
        return  # an x86-64 compiler would be needed to build the kernel
    with pytest.raises(TargetError, match=r"kernel matmul for x86_64 avx512\+fma 512-bit .* "
                                          r"cannot run on this machine: .*lacks avx512bw"):
        build(ops.matmul(4, 4, 4), avx512)
    with pytest.raises(TargetError, match="measuring kernels for x86_64 avx512"):
        LocalRunner(avx512)


def _probe_in_subprocess(host_isa: str) -> subprocess.CompletedProcess:
    code = "from tessel import Target; t = Target('host'); print(sorted(t.features), t.cflags)"
    env = {**os.environ, "TESSEL_HOST_ISA": host_isa}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


@pytest.mark.skipif(not Target("x86_64-avx2").features <= Target("host").features,
                    reason="the host is not an AVX2 (or wider) x86-64 CPU")
def test_host_isa_variable_runs_the_host_as_a_narrower_preset():
    """$TESSEL_HOST_ISA=x86_64-avx2 makes an AVX-512 machine probe as a Zen 3 would (the
    suite can then be run as it runs there); it cannot widen the host or cross arches."""
    proc = _probe_in_subprocess("x86_64-avx2")
    assert proc.returncode == 0, proc.stderr
    assert str(sorted(Target("x86_64-avx2").features)) in proc.stdout
    assert "-march=native" in proc.stdout
    if "avx512f" in target_module._probe_host()["features"]:
        assert "-mno-avx512f" in proc.stdout
    proc = _probe_in_subprocess("aarch64-neon")
    assert "TargetError: $TESSEL_HOST_ISA='aarch64-neon' is not a preset of this x86_64 host" \
        in proc.stderr
    if "avx512f" not in target_module._probe_host()["features"]:  # the CPU, not $TESSEL_HOST_ISA
        proc = _probe_in_subprocess("x86_64-avx512")
        assert "this host lacks avx512bw" in proc.stderr
