"""Target: the CPU a kernel is compiled for (ISA features, vector width, cores, caches, C compiler).

``Target("host")`` (the default) probes this machine once per process; with
``$TESSEL_HOST_ISA`` set to a preset of the host's architecture (read at that probe, e.g.
``x86_64-avx2`` on an AVX-512 machine) the host is taken to have only that preset's ISA
features, so a suite can be run as it runs on such a CPU. The named presets
(``Target("x86_64-avx2")`` ...) describe a generic CPU with a given ISA; they are deterministic
(1 core, default cache sizes) so they suit tests and cross-compilation. Any field can be
overridden by keyword: ``Target("host", cores=1)``, ``Target("x86_64-avx2", cores=8)``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tessel.errors import TesselError


class TargetError(TesselError, ValueError):
    """An unknown target, a bad field value or a failed probe of the host or compiler."""


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise TargetError(message)


_X86_FEATURES = frozenset({
    "sse2", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
    "avx512dq", "avx512cd", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni",
    "amx_tile", "amx_int8", "amx_bf16",
})
_ARM_FEATURES = frozenset({
    "neon", "asimd", "asimdhp", "asimddp", "fphp", "i8mm", "bf16", "sve", "sve2", "sme",
})
_KNOWN_FEATURES = {"x86_64": _X86_FEATURES, "aarch64": _ARM_FEATURES}
_ALIASES = {"avx512vnni": "avx512_vnni", "avxvnni": "avx_vnni", "sse4.1": "sse4_1",
            "sse4.2": "sse4_2", "avx512": "avx512f"}
_BASELINE = {"x86_64": frozenset({"sse2"}), "aarch64": frozenset({"neon", "asimd"})}

_DTYPE_BITS = {
    "bool": 8, "int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "float16": 16, "bfloat16": 16,
    "int32": 32, "uint32": 32, "float32": 32, "int64": 64, "uint64": 64, "float64": 64,
}
_VECTOR_BITS = (128, 256, 512, 1024, 2048)
_DEFAULT_CACHES = (32 * 1024, 1024 * 1024, 8 * 1024 * 1024)  # l1d, l2, l3 in bytes
# No -ffast-math: max reductions start from -INFINITY and must keep IEEE semantics.
_COMMON_CFLAGS = ("-fPIC", "-shared", "-fopenmp", "-fno-math-errno", "-fno-trapping-math",
                  "-ffp-contract=fast", "-std=gnu11")
_INT_FIELDS = ("cores", "l1d_bytes", "l2_bytes", "l3_bytes", "vector_registers")


@dataclass(frozen=True)
class _Preset:
    arch: str
    features: frozenset[str]
    isa_flags: tuple[str, ...]


_SSE = frozenset({"sse2", "sse4_1", "sse4_2"})
_AVX2 = _SSE | {"avx", "avx2", "fma", "f16c"}
_PRESETS = {
    "x86_64-sse": _Preset("x86_64", _SSE, ("-msse4.2",)),
    "x86_64-avx2": _Preset("x86_64", _AVX2, ("-mavx2", "-mfma", "-mf16c")),
    "x86_64-avx512": _Preset(
        "x86_64", _AVX2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"},
        ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512cd", "-mfma", "-mf16c",
         "-mprefer-vector-width=512")),
    "aarch64-neon": _Preset("aarch64", frozenset({"neon", "asimd"}), ("-march=armv8-a+simd",)),
}
VALID_TARGETS = ("host", *_PRESETS)


# ---- host probing (cached: Target("host") is cheap to build repeatedly) ----

def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _normalize_arch(machine: str) -> str:
    return {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine)


def _parse_cpuinfo(text: str) -> tuple[str, frozenset[str]]:
    """(cpu model, relevant ISA features) of the first CPU listed in /proc/cpuinfo text."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    model = fields.get("model name") or fields.get("hardware") or fields.get("cpu model") or ""
    flags = set((fields.get("flags") or fields.get("features") or "").split())
    if "asimd" in flags:
        flags.add("neon")
    return model, frozenset(flags & (_X86_FEATURES | _ARM_FEATURES))


def _parse_size(text: str) -> int | None:
    match = re.fullmatch(r"(\d+)\s*([KMG]?)i?B?", text.strip(), re.IGNORECASE)
    if match is None:
        return None
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2).upper()]
    return int(match.group(1)) * scale or None


def _read_caches(root: Path) -> tuple[int, int, int]:
    """(l1d, l2, l3) bytes from a sysfs dir like .../cpu0/cache; defaults where unreadable."""
    found: dict[int, int] = {}
    for index in sorted(root.glob("index*")):
        level, kind, size = (_read_text(index / name).strip() for name in ("level", "type", "size"))
        nbytes = _parse_size(size)
        if level.isdigit() and kind != "Instruction" and nbytes:
            found.setdefault(int(level), nbytes)
    return tuple(found.get(level, default) for level, default in zip((1, 2, 3), _DEFAULT_CACHES))


def count_cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@functools.cache
def _probe_host() -> dict[str, Any]:
    arch = _normalize_arch(platform.machine())
    model, features = _parse_cpuinfo(_read_text(Path("/proc/cpuinfo")))
    l1d, l2, l3 = _read_caches(Path("/sys/devices/system/cpu/cpu0/cache"))
    return dict(arch=arch, cpu_model=model or platform.processor() or arch,
                features=features or _BASELINE.get(arch, frozenset()), cores=count_cores(),
                l1d_bytes=l1d, l2_bytes=l2, l3_bytes=l3)


HOST_ISA_VARIABLE = "TESSEL_HOST_ISA"
# gcc's names for the features whose -mno-* flag is not "-mno-" + the name without "_"
_GCC_FEATURE = {"sse4_1": "sse4.1", "sse4_2": "sse4.2", "amx_tile": "amx-tile",
                "amx_int8": "amx-int8", "amx_bf16": "amx-bf16"}


@functools.cache
def _host() -> tuple[dict[str, Any], tuple[str, ...]]:
    """The host's fields and ISA flags: as probed, or limited to the preset named by
    $TESSEL_HOST_ISA (its features only; -march=native without the others)."""
    probed = _probe_host()
    native = ("-mcpu=native",) if probed["arch"] == "aarch64" else ("-march=native",)
    name = os.environ.get(HOST_ISA_VARIABLE, "")
    if not name:
        return probed, native
    preset = _PRESETS.get(name)
    _check(preset is not None and preset.arch == probed["arch"],
           f"${HOST_ISA_VARIABLE}={name!r} is not a preset of this {probed['arch']} host; "
           f"use one of {[n for n, p in _PRESETS.items() if p.arch == probed['arch']]}")
    missing = preset.features - probed["features"]
    _check(not missing, f"${HOST_ISA_VARIABLE}={name}: this host lacks "
                        f"{', '.join(sorted(missing))}, so it cannot run as {name}")
    extra = sorted(probed["features"] - preset.features)
    flags = native + tuple(f"-mno-{_GCC_FEATURE.get(f, f.replace('_', ''))}" for f in extra)
    return {**probed, "features": preset.features}, flags


def host_arch() -> str:
    """This machine's architecture: "x86_64", "aarch64", ..."""
    return _normalize_arch(platform.machine())


@functools.cache
def _libmvec_exports(symbol: str) -> bool:
    """Whether this machine's libmvec (glibc's vector math library) exports `symbol`."""
    try:
        return hasattr(ctypes.CDLL("libmvec.so.1"), symbol)
    except OSError:
        return False


def cross_compiler_name(arch: str) -> str:
    """The name Debian's cross gcc for `arch` has on PATH (package gcc-<arch>-linux-gnu)."""
    return f"{arch}-linux-gnu-gcc"


@functools.cache
def _default_compiler(arch: str) -> str:
    """For another architecture than this host's, its cross gcc when it is on PATH; else the
    first of cc, gcc, clang (a build for another architecture with it then fails with one line
    naming the package to install: tessel.codegen.emulate)."""
    if arch != host_arch():
        cross = shutil.which(cross_compiler_name(arch))
        if cross:
            return cross
    for name in ("cc", "gcc", "clang"):
        path = shutil.which(name)
        if path:
            return path
    raise TargetError("no C compiler found on PATH (looked for cc, gcc, clang); "
                      "install gcc or pass Target(compiler=...)")


def _resolve_compiler(name: str) -> str:
    path = shutil.which(name)
    _check(path is not None, f"C compiler {name!r} not found on PATH or not executable")
    return path


@functools.cache
def _compiler_version(path: str) -> str:
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise TargetError(f"cannot run C compiler {path!r}: {err}") from err
    lines = proc.stdout.strip().splitlines()
    _check(proc.returncode == 0 and bool(lines),
           f"'{path} --version' failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return lines[0].strip()


# ---- filling in and validating fields ----

def _defaults(name: str) -> dict[str, Any]:
    _check(isinstance(name, str) and name in VALID_TARGETS,
           f"unknown target {name!r}; valid targets: {', '.join(VALID_TARGETS)}")
    if name == "host":
        return dict(_host()[0])
    preset = _PRESETS[name]
    l1d, l2, l3 = _DEFAULT_CACHES
    return dict(arch=preset.arch, cpu_model="generic", features=preset.features, cores=1,
                l1d_bytes=l1d, l2_bytes=l2, l3_bytes=l3)


def _isa_flags(name: str) -> tuple[str, ...]:
    if name != "host":
        return _PRESETS[name].isa_flags
    return _host()[1]


def _vector_bits(features: frozenset[str]) -> int:
    if "avx512f" in features:
        return 512
    return 256 if features & {"avx2", "avx"} else 128


def _vector_registers(arch: str, features: frozenset[str]) -> int:
    """Architectural vector registers: x86-64 has 16 (xmm/ymm), 32 with AVX-512 (zmm);
    AArch64 has 32 (v0-v31, and z0-z31 with SVE)."""
    if arch == "aarch64" or "avx512f" in features:
        return 32
    return 16


def _str_collection(value: Any, key: str) -> tuple[str, ...]:
    _check(not isinstance(value, str) and hasattr(value, "__iter__"),
           f"{key} must be a collection of strings, got {value!r}")
    items = tuple(value)
    _check(all(isinstance(item, str) and item for item in items),
           f"{key} must contain only non-empty strings, got {value!r}")
    return items


def _complete(name: str, values: dict[str, Any]) -> dict[str, Any]:
    """Derive the fields not given (vector width, cflags, compiler) and normalize types."""
    features = frozenset(_canonical(f) for f in _str_collection(values["features"], "features"))
    known = _KNOWN_FEATURES.get(values["arch"])
    unknown = sorted(features - known) if known is not None else []
    _check(not unknown, f"unknown {values['arch']} feature(s) {', '.join(unknown)}; known: "
                        f"{', '.join(sorted(known or ()))}")
    values["features"] = features
    values.setdefault("vector_bits", _vector_bits(values["features"]))
    values.setdefault("vector_registers", _vector_registers(values["arch"], values["features"]))
    if "compiler" not in values:
        values["compiler"] = _default_compiler(str(values["arch"]))
    elif "compiler_version" not in values:
        compiler = values["compiler"]
        _check(isinstance(compiler, str), f"compiler must be a string, got {compiler!r}")
        values["compiler"] = _resolve_compiler(compiler)
    if "compiler_version" not in values:
        values["compiler_version"] = _compiler_version(values["compiler"])
    if "cflags" not in values:  # given (a Target from JSON in a worker): no compiler query
        version, isa = str(values["compiler_version"]), _isa_flags(name)
        values["cflags"] = ("-O3", *isa, *_tuning_flags(isa, values["compiler"], version),
                            *_COMMON_CFLAGS, *_workaround_flags(version))
    values["cflags"] = _str_collection(values["cflags"], "cflags")
    return values


# GCC's loop if-conversion turns `c ? x[i] : y[i]` into masked loads (AVX and AVX-512), and
# GCC 12.2 at -O3 then computes wrong values in nested loops whose inner trip count is not a
# multiple of the vector width: `x[i, j] < 0 ? y[i, j] : 0` over 15x7 is 0 in 19 of 105
# places, a (3, 2) + (3, 2) concatenation loses two elements (tests/test_codegen_c.py keeps
# both). The C printer cannot load both operands before the select instead (the untaken one
# may lie outside its buffer: a pad, a concatenation), so GCC does without that pass; no fixed
# GCC version is known. A kernel whose loops hold a conditional load (pads, where, concat)
# then runs that loop unvectorized; the rest compile as before.
_GCC_WORKAROUNDS = ("-fno-tree-loop-if-convert",)


# GCC's cost tables for AMD's Zen cores (-mtune=znver1-3: what -march=native picks on a Zen 2 to
# Zen 5 with GCC 12) fold a register tile's vector loads into its FMAs: a 4 x 16 AVX2 matmul tile
# loaded each vector of B once per row, 5 loads a step for 8 FMAs where 1 suffices, and ran at
# half speed on a Zen 3 (GMM-512 53 against 112 GFLOP/s, GMM-256 66 against 97; untuned
# MobileNet-v3 0.90x -> 1.04x onnxruntime, the BERT-base 0.77x -> 0.88x, in the same runs).
# There, -march=native keeps its instructions and GCC's generic tuning chooses the code (as for
# the presets, which have no -march and were always built that way).
_GENERIC_TUNE_OVER = ("znver",)


@functools.cache
def _native_tune(compiler: str) -> str:
    """The tuning `compiler`'s -march=native picks on this machine ("znver3",
    "sapphirerapids"); "" when it does not say (clang, a failure)."""
    try:
        proc = subprocess.run([compiler, "-march=native", "-Q", "--help=target"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    found = re.search(r"^\s*-mtune=\s*(\S+)", proc.stdout, re.MULTILINE)
    return found.group(1) if found and proc.returncode == 0 else ""


def _tuning_flags(isa_flags: tuple[str, ...], compiler: str,
                  version_line: str) -> tuple[str, ...]:
    """-mtune=generic where the host's -march=native (among `isa_flags`) would tune for a core
    whose cost tables GCC gets wrong for tessel's kernels (_GENERIC_TUNE_OVER); nothing
    elsewhere (presets have no -march)."""
    if "-march=native" not in isa_flags or _compiler_label(version_line).startswith("clang"):
        return ()
    return ("-mtune=generic",) if _native_tune(compiler).startswith(_GENERIC_TUNE_OVER) else ()


def _workaround_flags(version_line: str) -> tuple[str, ...]:
    """Flags that keep the compiler of `version_line` off its known miscompilations."""
    return () if _compiler_label(version_line).startswith("clang") else _GCC_WORKAROUNDS


def _validate(values: dict[str, Any]) -> None:
    for key in _INT_FIELDS:
        value = values[key]
        _check(isinstance(value, int) and not isinstance(value, bool) and value >= 1,
               f"{key} must be a positive integer, got {value!r}")
    _check(values["vector_bits"] in _VECTOR_BITS,
           f"vector_bits must be one of {_VECTOR_BITS}, got {values['vector_bits']!r}")
    for key in ("arch", "cpu_model", "compiler", "compiler_version"):
        _check(isinstance(values[key], str) and bool(values[key]),
               f"{key} must be a non-empty string, got {values[key]!r}")


def _canonical(feature: str) -> str:
    return _ALIASES.get(feature.lower(), feature.lower())


def _compiler_label(version_line: str) -> str:
    """'cc (Debian 12.2.0-14) 12.2.0' -> 'gcc 12.2.0'; 'clang version 14.0.0' -> 'clang 14.0.0'."""
    match = re.search(r"\d+\.\d+(?:\.\d+)?", version_line)
    version = f" {match.group(0)}" if match else ""
    first = version_line.split()[0] if version_line.split() else "cc"
    if "clang" in version_line.lower():
        return f"clang{version}"
    return f"gcc{version}" if first == "cc" or "gcc" in first else f"{first}{version}"


_ISA_BASES = (("avx512f", "avx512"), ("avx2", "avx2"), ("avx", "avx"), ("sse4_2", "sse4.2"),
              ("sse2", "sse2"), ("sve2", "sve2"), ("sve", "sve"), ("asimd", "neon"))


def _isa_base(features: frozenset[str]) -> str:
    return next((label for flag, label in _ISA_BASES if flag in features), "generic")


def _isa_summary(features: frozenset[str]) -> str:
    base = _isa_base(features)
    optional = (("fma", "fma"), ("avx512_vnni", "vnni"))
    extras = [label for flag, label in optional if flag in features]
    return "+".join([base, *extras])


@dataclass(frozen=True, init=False)
class Target:
    """A CPU compilation target. Build with ``Target(name="host", **overrides)``.

    ``name`` is "host" (probe this machine) or a preset in VALID_TARGETS. Any field below can be
    overridden by keyword; ``vector_bits`` defaults from ``features``, ``cflags`` from ``name``
    (-march=native for host, ISA flags for presets), ``compiler`` from cc/gcc/clang on PATH.
    A ``compiler`` given without ``compiler_version`` is looked up on PATH and asked its version.
    ``vector_registers`` (16 on x86-64, 32 with AVX-512 or on AArch64) sizes register tiles.
    """

    name: str
    arch: str
    cpu_model: str
    features: frozenset[str]
    vector_bits: int
    vector_registers: int
    cores: int
    l1d_bytes: int
    l2_bytes: int
    l3_bytes: int
    compiler: str
    compiler_version: str
    cflags: tuple[str, ...]

    def __init__(self, name: str = "host", **overrides: Any) -> None:
        valid = [f.name for f in dataclasses.fields(self) if f.name != "name"]
        unknown = sorted(set(overrides) - set(valid))
        _check(not unknown, f"unknown Target field(s) {unknown}; valid fields: {valid}")
        given = {key: value for key, value in overrides.items() if value is not None}
        values = _complete(name, {**_defaults(name), **given})
        _validate(values)
        object.__setattr__(self, "name", name)
        for key in valid:
            object.__setattr__(self, key, values[key])

    def has(self, feature: str) -> bool:
        return _canonical(feature) in self.features

    def vector_lanes(self, dtype: str) -> int:
        """How many elements of ``dtype`` fit in one vector register."""
        _check(dtype in _DTYPE_BITS,
               f"unknown dtype {dtype!r}; valid dtypes: {sorted(_DTYPE_BITS)}")
        return max(1, self.vector_bits // _DTYPE_BITS[dtype])

    def has_vector_function(self, symbol: str) -> bool:
        """Whether this target's C library has vector math entry `symbol` (libmvec's, e.g.
        _ZGVdN8v_expf): this machine's is asked for a target of its arch, else False."""
        return self.arch == host_arch() and _libmvec_exports(symbol)

    def host_gap(self) -> str:
        """Why this machine cannot run code built for this target ("" when it can): another
        architecture, or ISA features its CPU lacks (their instructions would kill the process
        with SIGILL)."""
        host = _host()[0]
        if self.arch != host["arch"]:
            return f"this host is {host['arch']}, not {self.arch}"
        missing = self.features - host["features"]
        if missing:
            return f"this host's CPU ({host['cpu_model']}) lacks {', '.join(sorted(missing))}"
        return ""

    @property
    def feature_flags(self) -> tuple[str, ...]:
        """gcc's names of this target's ISA features (``-m<name>``, and what
        ``__builtin_cpu_supports`` takes): "sse4.1", "avx512vnni", ...; none on aarch64, whose
        features are named by -march."""
        if self.arch != "x86_64":
            return ()
        return tuple(sorted(_GCC_FEATURE.get(f, f.replace("_", "")) for f in self.features))

    @property
    def portable_cflags(self) -> tuple[str, ...]:
        """``cflags`` with -march=native / -mcpu=native replaced by this target's features
        themselves (tuned for this machine still): what runs on any CPU that has them, as a
        library exported for other machines must (tessel.graph.export)."""
        if self.arch == "x86_64":
            isa = ("-march=x86-64", *(f"-m{f}" for f in self.feature_flags),
                   *(("-mprefer-vector-width=512",) if "avx512f" in self.features else ()))
        else:
            isa = ("-march=armv8-a+simd",)
        isa_names = {f"-m{_GCC_FEATURE.get(f, f.replace('_', ''))}" for f in _X86_FEATURES}
        flags = [f for f in self.cflags if not f.startswith(("-march=", "-mcpu=", "-mno-",
                                                               "-mprefer-vector-width="))
                 and f not in isa_names]
        native = any(f in ("-march=native", "-mcpu=native") for f in self.cflags)
        tuned = any(f.startswith("-mtune=") for f in self.cflags)
        tune = ("-mtune=native",) if native and not tuned and self.arch == host_arch() else ()
        return (flags[0], *isa, *tune, *flags[1:]) if flags else (*isa, *tune)

    def check_runs_here(self, what: str = "code") -> None:
        """Raise TargetError when this machine cannot run code built for this target."""
        gap = self.host_gap()
        _check(not gap, f"{what} for {self} cannot run on this machine: {gap}; use "
                        "Target('host') or a preset this CPU has")

    @property
    def isa_family(self) -> str:
        """The architecture and its widest vector ISA, e.g. "x86_64-avx512", "aarch64-neon":
        targets of one family run the same kind of generated code (what a pretrained cost
        model is trained for)."""
        return f"{self.arch}-{_isa_base(self.features)}"

    @property
    def accumulator_registers(self) -> int:
        """Vector registers a register tile of accumulators may hold: three quarters of them
        (12 of AVX2's 16, 24 of AVX-512's 32); the rest carry the operands loaded and
        broadcast at each step of the reduction."""
        return self.vector_registers * 3 // 4

    def fingerprint(self) -> dict[str, Any]:
        """The JSON-able facts that decide whether measurements on two targets are comparable."""
        return dict(arch=self.arch, cpu_model=self.cpu_model, features=sorted(self.features),
                    vector_bits=self.vector_bits, cores=self.cores,
                    compiler_version=self.compiler_version, cflags=list(self.cflags))

    def fingerprint_hash(self) -> str:
        canonical = json.dumps(self.fingerprint(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def to_json(self) -> str:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data.update(features=sorted(self.features), cflags=list(self.cflags))
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Target:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise TargetError(f"invalid Target JSON: {err}") from err
        _check(isinstance(data, dict) and "name" in data, f"Target JSON needs a 'name': {text!r}")
        return cls(data.pop("name"), **data)

    def __str__(self) -> str:
        plural = "core" if self.cores == 1 else "cores"
        return (f"{self.arch} {_isa_summary(self.features)} {self.vector_bits}-bit "
                f"x{self.cores} {plural} ({_compiler_label(self.compiler_version)})")


def as_target(target: Target | str | None) -> Target:
    """`target` as a Target, for an API that takes one: None is this host, a string names the
    host or a preset (Target(name)); anything else is refused with TargetError."""
    if target is None or isinstance(target, str):
        return Target(target if target is not None else "host")
    _check(isinstance(target, Target), f"target must be a tessel.Target (e.g. Target('host')) "
                                       f"or a target name, got {type(target).__name__} "
                                       f"{target!r}")
    return target
