#!/usr/bin/env python3
"""rembg's U2NetP taken apart: its own `remove` and its steps redone one at
a time on ../shared/eval/dev, to find which of them our pipeline differs in.

    python3 bench/rembg_steps.py [--sets alphamatting,grabcut,coco_mval,berkeley]

rembg 2.0.86 shrinks the photo to 320x320 with Lanczos, divides by its
largest value, normalises by ImageNet's mean and deviation, stretches the
output to [0, 1], truncates it to 8 bits and enlarges it with Lanczos. Each
variant changes one of the last two (our rounding, our Catmull-Rom; PIL's
BICUBIC is Catmull-Rom), or adds noise of -1, 0 or +1 to each value of the
shrunk photo (three seeds): how far rembg's own figures move on input that
differs by what two decoders or resizers do. Scored as quality_metrics.py
scores. Runs in
rembg's own venv (bench/wide.py makes it), on models/u2netp.onnx.
"""
import argparse, os, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT.parent / "shared" / "eval" / "dev"
# Each variant: (8-bit conversion, enlargement filter name in PIL), or the
# seed of the input's noise with rembg's steps.
VARIANTS = {
    "rembg's remove": None,
    "steps redone": ("truncate", "LANCZOS"),
    "rounded": ("round", "LANCZOS"),
    "Catmull-Rom enlargement": ("truncate", "BICUBIC"),
    "rounded, Catmull-Rom": ("round", "BICUBIC"),
    **{f"±1 noise, seed {seed}": seed for seed in (1, 2, 3)},
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", default="alphamatting,grabcut,coco_mval,berkeley")
    args = ap.parse_args()
    try:
        import rembg  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(Path(__file__).parent))
        from wide import peer_python
        models = ROOT / "target" / "eval" / "wide" / "rembg-models"
        models.mkdir(parents=True, exist_ok=True)
        if not (models / "u2netp.onnx").exists():
            (models / "u2netp.onnx").symlink_to(ROOT / "models" / "u2netp.onnx")
        env = {**os.environ, "U2NET_HOME": str(models), "MODEL_CHECKSUM_DISABLED": "1"}
        sys.exit(subprocess.run([peer_python("rembg"), __file__, *sys.argv[1:]], env=env).returncode)
    score(args.sets.split(","))


def score(sets):
    import numpy as np
    import onnxruntime as ort
    from PIL import Image
    from rembg import new_session

    session = new_session("u2netp")
    model = ort.InferenceSession(str(ROOT / "models" / "u2netp.onnx"),
                                 providers=["CPUExecutionProvider"])
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])

    def unit_matte(photo, seed=None):
        x = np.array(photo.resize((320, 320), Image.LANCZOS)).astype(np.float64)
        if seed is not None:
            x = np.clip(x + np.random.default_rng(seed).integers(-1, 2, x.shape), 0, 255)
        x = ((x / np.max(x) - mean) / std).transpose(2, 0, 1)[None].astype(np.float32)
        out = model.run(None, {model.get_inputs()[0].name: x})[0][0, 0]
        return (out - out.min()) / (out.max() - out.min())

    def truth(path):
        im = Image.open(path)
        if im.mode == "P":
            a = np.asarray(im)
            return np.where(a == 255, 128, (a > 0) * 255).astype(np.float32)
        return np.asarray(im.convert("L"), dtype=np.float32)

    for name in sets:
        truths = {p.stem: p for p in (DEV / name / "gt").iterdir()}
        sums = {v: np.zeros(2) for v in VARIANTS}
        photos = sorted((DEV / name / "images").iterdir())
        for path in photos:
            photo = Image.open(path).convert("RGB")
            gt = truth(truths[path.stem])
            valid, gt = gt != 128, gt / 255.0
            unit = unit_matte(photo) * 255
            for variant, steps in VARIANTS.items():
                if steps is None:
                    matte = session.predict(photo)[0]
                elif isinstance(steps, int):
                    noisy = (unit_matte(photo, steps) * 255).astype(np.uint8)
                    matte = Image.fromarray(noisy, "L").resize(photo.size, Image.LANCZOS)
                else:
                    bits, enlarge = steps
                    eight = unit.astype(np.uint8) if bits == "truncate" else np.round(unit).astype(np.uint8)
                    matte = Image.fromarray(eight, "L").resize(photo.size, getattr(Image, enlarge))
                if matte.size != (gt.shape[1], gt.shape[0]):
                    matte = matte.resize((gt.shape[1], gt.shape[0]), Image.BILINEAR)
                p = np.asarray(matte, dtype=np.float32) / 255.0
                g, q = (gt >= 0.5) & valid, (p >= 0.5) & valid
                union = (g | q).sum()
                sums[variant] += [np.abs(p - gt)[valid].mean(), (g & q).sum() / union if union else 1.0]
        for variant, (mae, iou) in sums.items():
            print(f"{name:13s} {variant:24s} MAE {mae / len(photos):.4f}  IoU {iou / len(photos):.4f}",
                  flush=True)


if __name__ == "__main__":
    main()
