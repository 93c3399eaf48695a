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
differs by what two decoders or resizers do. The mattes are made in rembg's
own venv (bench/wide.py makes it), on models/u2netp.onnx, under
target/eval/rembg-steps, and scored by quality_metrics.py (bench/eval.py's
`score`).
"""
import argparse, subprocess, sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from eval import OUT, ROOT, SETS, SHARED, python, score  # noqa: E402

STEPS = OUT / "rembg-steps"
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


def folder(variant, name):
    slug = "".join(c if c.isalnum() else "-" for c in variant)
    return STEPS / slug / name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", default=",".join(SETS))
    sets = ap.parse_args().sets.split(",")
    from wide import peer_python, rembg_env
    subprocess.run([peer_python("rembg"), __file__, "--make", *sets], check=True, env=rembg_env())
    py = python()
    for name in sets:
        for variant in VARIANTS:
            s = score(py, SHARED / "eval" / "dev" / name, folder(variant, name))
            print(f"{name:13s} {variant:24s} MAE {s['mae']:.4f}  IoU {s['iou']:.4f}", flush=True)


def make(sets):
    """Each variant's mattes of each set, in rembg's venv."""
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

    for name in sets:
        for path in sorted((SHARED / "eval" / "dev" / name / "images").iterdir()):
            photo = Image.open(path).convert("RGB")
            unit = unit_matte(photo) * 255
            for variant, steps in VARIANTS.items():
                if steps is None:
                    matte = session.predict(photo)[0]
                else:
                    if isinstance(steps, int):
                        eight, enlarge = (unit_matte(photo, steps) * 255).astype(np.uint8), "LANCZOS"
                    else:
                        bits, enlarge = steps
                        eight = unit.astype(np.uint8) if bits == "truncate" else np.round(unit).astype(np.uint8)
                    matte = Image.fromarray(eight, "L").resize(photo.size, getattr(Image, enlarge))
                out = folder(variant, name)
                out.mkdir(parents=True, exist_ok=True)
                matte.save(out / (path.stem + ".png"))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--make"]:
        make(sys.argv[2:])
    else:
        main()
