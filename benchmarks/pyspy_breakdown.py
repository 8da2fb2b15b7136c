"""Where a training run's time goes, from a py-spy recording: the share of each call made directly by
one function (the "root"), summed over all samples that pass through it.

    py-spy record -f raw -r 200 -o dqn.txt -- python benchmarks/compare.py --child ours dqn 0 1
    python benchmarks/pyspy_breakdown.py dqn.txt DQN.training_step        # per line of training_step
    python benchmarks/pyspy_breakdown.py dqn.txt ReplayCollector._run      # collection
    python benchmarks/pyspy_breakdown.py dqn.txt _FitLoop.run --depth 9    # deeper call chains

(``compare.py --child ours ALGO SEED THREADS`` is one of compare.py's runs: the algorithm's config, its
budget and evaluation protocol.) Prints the root's share of all samples, then its callees by line,
largest first.
"""

from __future__ import annotations

import argparse
import collections


def frame_name(frame: str) -> str:
    """``func (path/file.py:123)`` -> ``func:123``."""
    name, _, where = frame.partition(" (")
    return f"{name}:{where.rstrip(')').rsplit(':', 1)[-1]}" if where else name


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("raw", help="py-spy record -f raw output")
    p.add_argument("root", help="function name (or any substring of its frame) to break down")
    p.add_argument("--depth", type=int, default=1, help="frames below the root to tell callees apart by")
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    total = in_root = 0
    callees: collections.Counter[str] = collections.Counter()
    with open(args.raw) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            n = int(count)
            total += n
            frames = stack.split(";")
            for i, frame in enumerate(frames):
                if args.root in frame:
                    in_root += n
                    below = frames[i + 1 : i + 1 + args.depth]
                    line_no = frame_name(frame).rsplit(":", 1)[-1]
                    callees[f"line {line_no} -> " + (" > ".join(map(frame_name, below)) or "(itself)")] += n
                    break
    print(f"{args.root}: {in_root / max(total, 1):.1%} of {total} samples")
    for key, n in callees.most_common(args.top):
        print(f"{n / max(in_root, 1):6.1%}  {key}")


if __name__ == "__main__":
    main()
