"""A torchvision-style ResNet-18 through `torch.compile(backend="tessel")`: tune, run, compare
with eager PyTorch.

    python examples/torch_compile.py --trials 256 --db resnet.db    # ~2-3 min of tuning
    python examples/torch_compile.py --trials 0 --db resnet.db      # reuse the records

Tuning measures every distinct kernel of the model on this machine and stores the records in
the database; `--trials 0` compiles with what the database holds (expert priors where it holds
nothing). The first call traces, tunes and compiles; later calls run the compiled kernels.
"""
import argparse
import time

import torch

from tessel.graph.frontend import models


def latency(fn, x, seconds: float = 2.0) -> float:
    """Median seconds per call of fn(x) over about `seconds`."""
    fn(x)
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        start = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=256, help="tuning trials (0: compile only)")
    ap.add_argument("--db", default="resnet.db", help="the record database")
    ap.add_argument("--image", type=int, default=224)
    args = ap.parse_args()
    module, (image,) = models.build("resnet18", image=args.image)  # random weights, batch 1
    fast = torch.compile(module, backend="tessel",
                         options={"database": args.db, "tune": args.trials})
    with torch.no_grad():
        start = time.perf_counter()
        got = fast(image)  # traces, tunes (with --trials), compiles
        print(f"first call (trace, tune, compile): {time.perf_counter() - start:.1f} s")
        want = module(image)
        print(f"max |tessel - eager|: {(got - want).abs().max().item():.2e}")
        eager, tessel = latency(module, image), latency(fast, image)
    print(f"eager {eager * 1e3:.2f} ms, tessel {tessel * 1e3:.2f} ms "
          f"({eager / tessel:.2f}x eager)")


if __name__ == "__main__":
    main()
