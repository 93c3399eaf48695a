#!/usr/bin/env python3
"""A people-scenes dev set made from the shared dev photos: two to five of
dev/ppm's people, cut out with their true alpha, stood side by side at a
booth's distances in front of real street and vehicle photos of
dev/coco_mval: half of them sharp (the car beside her: the salient thing
that is not a person), half out of focus as a booth's backdrop is, where a
general model has no other thing to cut out.

    python3 bench/people_scenes.py [OUT_DIR]   (default target/eval/people-scenes)

Writes OUT_DIR/images/*.jpg, OUT_DIR/gt/*.png (the scene's true alpha: every
person, front over back) and OUT_DIR/SOURCE.txt, the same on every run
(fixed seed). Score with ../shared/tools/matting_metrics.py. The scenes are
made from photos that are not ours to redistribute: they stay under target/,
never in the repository.
"""
import random, sys
from pathlib import Path
import numpy as np
from PIL import Image, ImageFilter

ROOT = Path(__file__).resolve().parent.parent
PPM = ROOT.parent / "shared" / "eval" / "dev" / "ppm"
COCO = ROOT.parent / "shared" / "eval" / "dev" / "coco_mval" / "images"
SEED = 86
SCENES = 24
LONG_SIDE = 1600
# A backdrop well out of focus, at LONG_SIDE.
BLUR_RADIUS = 24
# Backgrounds looked at one by one: vehicles, animals, street furniture; none
# with a person in sight (their truth would call that person background).
BACKGROUNDS = [
    "airplane03_000000281693", "airplane05_000000005477", "bench00_000000322829",
    "bench06_000000303908", "boat01_000000365098", "boat05_000000330369",
    "bus01_000000359937", "bus02_000000574425", "bus03_000000106048", "bus06_000000394275",
    "bus09_000000497867", "cow01_000000222863", "dog08_000000292330",
    "fire-hydrant05_000000255718", "horse00_000000281447", "horse09_000000356968",
    "motorcycle03_000000270066", "motorcycle04_000000408830", "potted-plant05_000000069795",
    "stop-sign02_000000191471", "train00_000000578967", "train06_000000534639",
    "truck01_000000081394", "clock07_000000140929",
]


def person(stem):
    """A ppm person as RGB and alpha arrays, cropped to where the alpha is."""
    alpha = np.asarray(Image.open(PPM / "gt" / f"{stem}.jpg").convert("L"))
    rgb = np.asarray(Image.open(PPM / "images" / f"{stem}.jpg").convert("RGB"))
    ys, xs = np.nonzero(alpha > 8)
    y0, y1, x0, x1 = ys.min(), ys.max() + 1, xs.min(), xs.max() + 1
    # Cut off by the photo's bottom edge: a half-body portrait, stood on the frame's edge.
    cut_off = y1 >= alpha.shape[0] - 2
    return rgb[y0:y1, x0:x1], alpha[y0:y1, x0:x1], cut_off


def scene(rng, background, people, blurred):
    bg = Image.open(COCO / f"{background}.jpg").convert("RGB")
    scale = LONG_SIDE / max(bg.size)
    bg = bg.resize((round(bg.width * scale), round(bg.height * scale)), Image.BICUBIC)
    if blurred:
        bg = bg.filter(ImageFilter.GaussianBlur(BLUR_RADIUS))
    w, h = bg.size
    image = np.asarray(bg, dtype=np.float64)
    truth = np.zeros((h, w))
    # The farthest first: smaller, higher; the nearest drawn last, over them.
    depths = sorted((rng.uniform(0.0, 1.0) for _ in people), reverse=True)
    slots = list(range(len(people)))
    rng.shuffle(slots)
    for stem, depth, slot in zip(people, depths, slots):
        rgb, alpha, cut_off = person(stem)
        height = h * (0.85 - 0.5 * depth)  # 85% of the frame near, 35% far
        s = height / rgb.shape[0]
        size = (max(1, round(rgb.shape[1] * s)), max(1, round(rgb.shape[0] * s)))
        if size[0] > 0.6 * w:
            s = 0.6 * w / rgb.shape[1]
            size = (max(1, round(rgb.shape[1] * s)), max(1, round(rgb.shape[0] * s)))
        f = np.asarray(Image.fromarray(rgb).resize(size, Image.LANCZOS), dtype=np.float64)
        a = np.asarray(Image.fromarray(alpha).resize(size, Image.BILINEAR), dtype=np.float64) / 255
        centre = (slot + 0.5) / len(people) * w + rng.uniform(-0.08, 0.08) * w
        x = int(round(centre - size[0] / 2))
        bottom = h if cut_off else int(h * (1.0 - 0.12 * depth))
        y = bottom - size[1]
        # The part of the person inside the frame.
        fx0, fy0 = max(0, -x), max(0, -y)
        fx1, fy1 = min(size[0], w - x), min(size[1], h - y)
        if fx1 <= fx0 or fy1 <= fy0:
            continue
        a = a[fy0:fy1, fx0:fx1, None]
        region = (slice(y + fy0, y + fy1), slice(x + fx0, x + fx1))
        image[region] = f[fy0:fy1, fx0:fx1] * a + image[region] * (1 - a)
        truth[region] = a[..., 0] + truth[region] * (1 - a[..., 0])
    return image, truth


def main():
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "target" / "eval" / "people-scenes"
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "gt").mkdir(parents=True, exist_ok=True)
    rng = random.Random(SEED)
    stems = sorted(p.stem for p in (PPM / "gt").iterdir())
    lines = []
    for i in range(SCENES):
        background = BACKGROUNDS[i % len(BACKGROUNDS)]
        people = rng.sample(stems, rng.randint(2, 5))
        blurred = i % 2 == 1
        image, truth = scene(rng, background, people, blurred)
        name = f"scene{i:02d}"
        Image.fromarray(np.clip(image + 0.5, 0, 255).astype(np.uint8)).save(
            out / "images" / f"{name}.jpg", quality=92)
        Image.fromarray(np.clip(truth * 255 + 0.5, 0, 255).astype(np.uint8)).save(
            out / "gt" / f"{name}.png")
        lines.append(f"{name}: {background}{' out of focus' if blurred else ''} with {', '.join(people)}")
    (out / "SOURCE.txt").write_text(
        "People scenes made by bench/people_scenes.py (seed %d): dev/ppm's people with their\n"
        "true alpha (PPM-100, CC BY-NC-SA 4.0 mattes, Flickr photos) in front of dev/coco_mval's\n"
        "photos (COCO, their own licences): for measuring only, never to be copied into the\n"
        "repository. Truth: every person's alpha, the nearer over the farther.\n\n" % SEED
        + "\n".join(lines) + "\n")
    print(f"{SCENES} scenes in {out}")


if __name__ == "__main__":
    main()
