"""The size of each built-in template's config space on the workloads it applies to (the
AutoTVM paper reports billions of configurations for conv2d), with its knobs' dimensions.

    python benchmarks/template_space_sizes.py
"""
from __future__ import annotations

from tessel import ops
from tessel.space import SpaceError, make_space

CASES = {"matmul": ["GMM", "GMM-1024"], "batch_matmul": ["TBG"],
         "conv2d": ["C2D", "DIL", "GRP", "T2D", "CBR"] + [f"R18-C{i}" for i in range(1, 13)],
         "depthwise_conv2d": ["DEP"]}


def main() -> None:
    print(f"{'template':<17} {'workload':<9} {'configs':>10}  knobs (values each)")
    for template, names in CASES.items():
        space = make_space(template)
        for name in names:
            try:
                cs = space.config_space(ops.SUITE[name])
            except SpaceError as err:
                print(f"{template:<17} {name:<9} {'-':>10}  {err}")
                continue
            dims = " ".join(f"{k}={len(v)}" for k, v in cs.knobs.items())
            print(f"{template:<17} {name:<9} {cs.size:>10.2e}  {dims}")


if __name__ == "__main__":
    main()
