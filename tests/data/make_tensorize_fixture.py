"""Writes tensorize_v2.json: traces with blockize and tensorize (format tessel.trace/2) and the
structural hashes of the programs they make, for tests/test_schedule_tensorize.py, which
replays them with the tessel of its day. Run once, with the tessel that wrote the traces
(commit noted in the file); never regenerate to make a failing replay pass.

    python tests/data/make_tensorize_fixture.py
"""
import json
import random
import subprocess
import sys
from pathlib import Path

import tessel
from tessel import ops
from tessel.ir.structural import structural_hash
from tessel.space import default_postprocs, make_space, postprocess

sys.path.insert(0, str(Path(__file__).parent.parent))
from intrin_cases import tensorized  # noqa: E402

from tessel import intrin  # noqa: E402

CASES = []
for name, (M, N, K) in (("dot_u8s8_16x4_vnni", (7, 48, 36)), ("dot_s8s8_8x2_avx2", (5, 24, 10)),
                        ("dot_s8s8_4x4_sdot", (3, 8, 12))):
    sch = tensorized(intrin.get(name), M, N, K, mr=min(M, 4) if M % 4 == 0 else 1)
    a, b = (p.dtype for p in intrin.get(name).desc.params[:2])
    CASES.append(dict(op="matmul", args=dict(M=M, N=N, K=K, dtype=a, b_dtype=b,
                                             out_dtype="int32"),
                      trace=sch.trace.to_json(), scheduled=structural_hash(sch.func)))
for target in ("x86_64-avx2", "x86_64-avx512"):
    func = ops.batch_matmul(2, 16, 32, 24, dtype="uint8", b_dtype="int8", out_dtype="int32")
    t = tessel.Target(target, features=[*tessel.Target(target).features, "avx512_vnni"]
                      if target.endswith("512") else None)
    final = postprocess(make_space("auto", t).sample(func, random.Random(3)),
                        default_postprocs(t), strict=True)
    CASES.append(dict(op="batch_matmul", args=dict(B=2, M=16, N=32, K=24, dtype="uint8",
                                                   b_dtype="int8", out_dtype="int32"),
                      trace=final.trace.to_json(), scheduled=structural_hash(final.func)))
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                        text=True, cwd=Path(__file__).parent).stdout.strip()
out = Path(__file__).parent / "tensorize_v2.json"
out.write_text(json.dumps(dict(commit=commit, cases=CASES), indent=1) + "\n")
print(f"wrote {len(CASES)} traces to {out}")
