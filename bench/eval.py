#!/usr/bin/env python3
"""Cut-out quality on ../shared/eval/dev, next to the peers' reference figures.

    python3 bench/eval.py [--models default,isnet,isnet-int8,modnet,u2netp] [--engine onnxruntime]

Runs `cutout remove` (the API's pipeline) on every photo of each dev set,
scores the cut-outs with ../shared/tools/quality_metrics.py and prints one
table: MAE, IoU and SAD/1000 per set and model, and the MAE as a ratio of the
best reference on that set and of the same model's reference
(../shared/eval/REFERENCE.md: the same weights, the peers' processing).
On alphamatting, whose truth is a real alpha, bench/composite.py also
measures the cut-outs' colour over new backgrounds.
`default` is what `type=auto` gives in the default configuration.
Needs `cargo build --release`, `make models` (and `make onnxruntime`). The
photos stay outside the repository: BMPs are converted to PNG (lossless)
under target/eval, where the cut-outs land too.
"""
import argparse, json, re, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
OUT = ROOT / "target" / "eval"
SETS = ["alphamatting", "grabcut"]
# quality_metrics.py's own needs and composite.py's pymatting, pinned.
PACKAGES = ["numpy==2.4.6", "pillow==12.3.0", "pymatting==1.1.16", "scipy==1.17.1",
            "numba==0.68.1", "llvmlite==0.50.0"]
VENV = Path.home() / ".cache" / "cutout-eval" / "-".join(p.replace("==", "-") for p in PACKAGES)
API_FORMATS = {".jpg", ".jpeg", ".png", ".webp"}


def python():
    exe = VENV / "bin" / "python"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([exe, "-m", "pip", "install", "-q", *PACKAGES], check=True)
    return exe


def inputs(py, name):
    """The set's photos in formats the API takes."""
    d = OUT / "inputs" / name
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for src in sorted((SHARED / "eval" / "dev" / name / "images").iterdir()):
        if src.suffix.lower() in API_FORMATS:
            paths.append(src)
            continue
        dst = d / (src.stem + ".png")
        if not dst.exists():
            subprocess.run([py, "-c", "import sys; from PIL import Image; "
                            "Image.open(sys.argv[1]).convert('RGB').save(sys.argv[2])", src, dst],
                           check=True)
        paths.append(dst)
    return paths


def references():
    """{(set, model): {"mae", "iou", "sad_k"}} from REFERENCE.md's table."""
    refs = {}
    for line in (SHARED / "eval" / "REFERENCE.md").read_text().splitlines():
        m = re.match(r"\|\s*dev/(\w+) \(\d+\)\s*\|\s*(\w+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)", line)
        if m:
            refs[(m[1], m[2])] = {"mae": float(m[3]), "iou": float(m[4]), "sad_k": float(m[5])}
    return refs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="default,isnet,isnet-int8,modnet,u2netp")
    ap.add_argument("--engine", default="onnxruntime")
    args = ap.parse_args()
    py = python()
    refs = references()
    binary = ROOT / "target" / "release" / "cutout"
    rows = []
    for model in args.models.split(","):
        for name in SETS:
            pred = OUT / args.engine / model / name
            pred.mkdir(parents=True, exist_ok=True)
            cmd = [binary, "--models-dir", ROOT / "models", "remove", *inputs(py, name), pred,
                   "--engine", args.engine]
            if model != "default":
                cmd += ["--model", model]
            started = time.monotonic()
            subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
            seconds = time.monotonic() - started
            score = json.loads(subprocess.run(
                [py, SHARED / "tools" / "quality_metrics.py", SHARED / "eval" / "dev" / name, pred],
                check=True, capture_output=True, text=True).stdout)
            best = min(r["mae"] for (s, _), r in refs.items() if s == name)
            own = refs.get((name, model))
            if name == "alphamatting":
                colour = json.loads(subprocess.run(
                    [py, ROOT / "bench" / "composite.py", SHARED / "eval" / "dev" / name, pred,
                     OUT / "true-foreground" / name],
                    check=True, capture_output=True, text=True).stdout)
                score["composite"] = colour
            rows.append((name, model, score, best, own, seconds))
            print(json.dumps({"set": name, "model": model, **score}), file=sys.stderr, flush=True)

    print(f"| set | model | MAE | IoU | SAD/1000 | MAE / best ref | MAE / own ref | IoU, SAD vs own ref | s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, model, s, best, own, seconds in rows:
        own_ratio = f"{s['mae'] / own['mae']:.2f}" if own else ""
        own_others = (f"{s['iou'] - own['iou']:+.4f}, {s['sad_k'] - own['sad_k']:+.2f}"
                      if own else "")
        print(f"| {name} ({s['n']}) | {model} | {s['mae']:.4f} | {s['iou']:.4f} | {s['sad_k']:.2f} "
              f"| {s['mae'] / best:.2f} | {own_ratio} | {own_others} | {seconds:.0f} |")
    print("\nComposite over new backgrounds, error on partial pixels (bench/composite.py):\n")
    print("| set | model | cut-out's colours | photo's colours, same alpha |")
    print("|---|---|---|---|")
    for name, model, s, *_ in rows:
        if "composite" in s:
            c = s["composite"]
            print(f"| {name} | {model} | {c['cutout_colours']:.4f} | {c['photo_colours']:.4f} |")
    print(f"\n`python3 bench/eval.py {' '.join(sys.argv[1:])}`, engine {args.engine}")


if __name__ == "__main__":
    main()
