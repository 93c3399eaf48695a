#!/usr/bin/env python3
"""Foreground colour, measured by compositing.

    composite.py SET_DIR PRED_DIR CACHE_DIR

Each cut-out in PRED_DIR (RGBA PNG per stem) is laid over four new
backgrounds and compared with the ground-truth composite: the photo's
foreground colour estimated from the true alpha (pymatting's multilevel
method, cached in CACHE_DIR) over the same backgrounds with the true alpha.
Prints one JSON line: the mean absolute error (0-1, averaged over RGB and
the backgrounds) over the pixels whose true alpha is partial, for the
cut-out as it is and for the same alpha over the photo's own colours (what
the peers ship), so the two differ only in colour.
"""
import json, os, sys
import numpy as np
from PIL import Image
from pymatting import estimate_foreground_ml

BACKGROUNDS = [np.array(c, np.float32) / 255 for c in
               [(40, 200, 60), (255, 255, 255), (20, 20, 20), (60, 90, 220)]]


def composite_error(colour, alpha, true_composites, partial):
    a = alpha[..., None]
    errors = [np.abs(colour * a + bg * (1 - a) - truth).mean(2)[partial].mean()
              for bg, truth in zip(BACKGROUNDS, true_composites)]
    return float(np.mean(errors))


def main():
    set_dir, pred_dir, cache = sys.argv[1:4]
    os.makedirs(cache, exist_ok=True)
    totals = {"cutout_colours": 0.0, "photo_colours": 0.0}
    n = 0
    for name in sorted(os.listdir(os.path.join(set_dir, "images"))):
        stem = os.path.splitext(name)[0]
        photo = np.asarray(Image.open(os.path.join(set_dir, "images", name)).convert("RGB"),
                           np.float32) / 255
        gt = next(f for f in os.listdir(os.path.join(set_dir, "gt")) if f.startswith(stem + "."))
        true_alpha = np.asarray(Image.open(os.path.join(set_dir, "gt", gt)).convert("L"),
                                np.float32) / 255
        fg_path = os.path.join(cache, stem + ".npy")
        if not os.path.exists(fg_path):
            np.save(fg_path, estimate_foreground_ml(photo.astype(np.float64),
                                                    true_alpha.astype(np.float64)).astype(np.float32))
        true_fg = np.load(fg_path)
        truths = [true_fg * true_alpha[..., None] + bg * (1 - true_alpha[..., None])
                  for bg in BACKGROUNDS]
        partial = (true_alpha > 0.02) & (true_alpha < 0.98)
        cut = np.asarray(Image.open(os.path.join(pred_dir, stem + ".png")).convert("RGBA"),
                         np.float32) / 255
        alpha = cut[..., 3]
        totals["cutout_colours"] += composite_error(cut[..., :3], alpha, truths, partial)
        totals["photo_colours"] += composite_error(photo, alpha, truths, partial)
        n += 1
    print(json.dumps({"n": n, **{k: round(v / n, 4) for k, v in totals.items()}}))


if __name__ == "__main__":
    main()
