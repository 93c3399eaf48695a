#!/usr/bin/env python3
"""Each of crates/tract-planned's passes' gain on each model: one dev photo
cut out on tract with every pass, then with each pass that applies to the
model left out (TRACT_PLANNED_LEAVE_OUT), the model step's median of RUNS
runs after one to warm up. Prints a Markdown table (BENCHMARKS.md,
"tract-planned: each operator's gain"): the model's time with all passes,
and per pass how much longer a run takes without it.

Usage: bench/planned_gains.py [--binary target/release/cutout] [--runs 3]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHOTO = ROOT.parent / "shared/eval/dev/grabcut/images/106024.jpg"
# The model, and the `type` that runs it alone (no blend, no second opinion).
MODELS = [
    ("isnet", "general"),
    ("isnet-int8", "general"),
    ("modnet", "person"),
    ("modnet-int8", "person"),
    ("u2netp", "auto"),
]
# The pass as TRACT_PLANNED_LEAVE_OUT names it, and its count in the log's
# `Replaced { .. }`.
PASSES = {
    "qconv": "qconvs",
    "resize": "resizes",
    "norm": "norms",
    "fuse": "fused",
    "pad": "pads",
    "im2col": "im2cols",
    "max_pool": "max_pools",
}


def cut_out(binary, model, subject, runs, leave_out):
    """The model step's milliseconds of each run after the first, and the
    passes' counts of replaced nodes."""
    env = dict(os.environ, RUST_LOG="warn,cutout::engine::tract=debug",
               TRACT_PLANNED_LEAVE_OUT=leave_out)
    with tempfile.TemporaryDirectory() as out:
        command = [binary, "--models-dir", str(ROOT / "models"), "remove",
                   "--model", model, "--engine", "tract", "--type", subject]
        command += [str(PHOTO)] * (runs + 1) + [out]
        log = subprocess.run(command, env=env, capture_output=True, text=True)
    if log.returncode != 0:
        sys.exit(f"{model} without {leave_out or 'nothing'}: {log.stderr}")
    made_by = re.findall(r" with (\S+) on tract", log.stderr)
    if set(made_by) != {model}:
        sys.exit(f"{model}: the cut-outs were made by {made_by}")
    times = [int(ms) for ms in re.findall(r"\bmodel (\d+) ms", log.stderr)]
    counts = re.search(r"Replaced \{([^}]*)\}", log.stderr)
    replaced = dict(re.findall(r"(\w+): (\d+)", counts.group(1))) if counts else {}
    return times[1:], {k: int(v) for k, v in replaced.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=str(ROOT / "target/release/cutout"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--models", default=",".join(m for m, _ in MODELS))
    args = parser.parse_args()
    wanted = args.models.split(",")
    rows = []
    for model, subject in MODELS:
        if model not in wanted:
            continue
        times, replaced = cut_out(args.binary, model, subject, args.runs, "")
        base = statistics.median(times)
        cells = {}
        for name, field in PASSES.items():
            if replaced.get(field, 0) == 0:
                cells[name] = "—"
                continue
            without, _ = cut_out(args.binary, model, subject, args.runs, name)
            gain = statistics.median(without) / base - 1
            cells[name] = f"{gain:+.0%} ({replaced[field]})"
            print(f"{model}: without {name} {statistics.median(without):.0f} ms, "
                  f"with {base:.0f} ms", file=sys.stderr)
        rows.append((model, base, cells))
    print("| model | all passes | " + " | ".join(PASSES) + " |")
    print("|---|---|" + "---|" * len(PASSES))
    for model, base, cells in rows:
        print(f"| {model} | {base:.0f} ms | " + " | ".join(cells[p] for p in PASSES) + " |")


if __name__ == "__main__":
    main()
