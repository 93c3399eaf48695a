#!/usr/bin/env python3
"""Quantise IS-Net to int8, reproducibly: the same bytes from the same inputs.

    python3 models/quantize.py --source models/isnet.onnx --out models/isnet-int8.onnx
    python3 models/quantize.py --engine tract --source models/isnet.onnx \
        --out models/isnet-int8.tract.onnx

`make quantize` (models/fetch.py isnet-int8) runs this and checks the result
against the sha256 in models/manifest.toml. It runs in the venv of pinned
tools that models/prepare.py makes under the cache, and calibrates on eight
photos from a pinned scikit-image wheel, never on the eval sets.

The recipe, and why (BENCHMARKS.md, "int8 IS-Net"):
- The fp16 file is first widened to f32 and cut to its first output, as both
  engines load it. Quantising the fp16 file as is (its Cast nodes included)
  is what made the earlier int8 attempts useless.
- Static QDQ quantisation: int8 weights per output channel, uint8
  activations whose ranges are the min/max seen over the calibration photos,
  each squashed to 1024x1024 (calibration needs the ranges a photo gives,
  and a squashed photo fills the whole input). Percentile calibration scored
  no better and took 21 GB of memory; MinMax takes about 6 GB.
- U2NetP and MODNet lost most of their quality under the same recipe, and
  MODNet stayed over the quality bar with tract's recipe below under six
  calibrations (BENCHMARKS.md, "MODNet in int8: not shipped"), so only
  IS-Net has an int8 variant.
- For tract (`--engine tract`), the convolutions alone, in the QOperator
  format (QuantizeLinear, QLinearConv, DequantizeLinear), everything else in
  f32: tract-planned's QConv runs each such triple as one int8 convolution
  between f32 tensors. tract runs a QDQ graph's convolutions in f32, with
  the quantisations around them added (BENCHMARKS.md, "int8 on tract").
  Quantised from the graph made to run at any size (models/prepare.py), it
  runs at the photo's aspect as isnet does, where it kept isnet's quality.
"""
import argparse, subprocess, sys, zipfile
from pathlib import Path

from prepare import default_cache, venv_python

# The same wheel whatever the machine, so the same photos.
CALIBRATION_WHEEL = ("scikit-image", "0.25.2", "manylinux2014_x86_64")
CALIBRATION_SHA256 = "24cc986e1f4187a12aa319f777b36008764e856e5013666a4a83f8df083c2641"
CALIBRATION_PHOTOS = ["astronaut.png", "brick.png", "camera.png", "chelsea.png", "coffee.png",
                      "coins.png", "motorcycle_left.png", "rocket.jpg"]
SIZE = 1024


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


def quantize(source, out, wheel, scratch, engine):
    """Runs inside the pinned venv."""
    import io
    import numpy as np
    import onnx
    from PIL import Image
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                          QuantType, quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    f32, prepared = scratch / "f32.onnx", scratch / "prepared.onnx"
    model = widened(onnx.load(source))
    if engine == "tract":
        from prepare import fit_input
        fit_input(model.graph, None)  # at the photo's aspect, as isnet on tract
    input_name = model.graph.input[0].name
    onnx.save(model, f32)
    del model  # 176 MB that calibration does not need
    quant_pre_process(str(f32), str(prepared), skip_symbolic_shape=True)

    def tensor(data):  # IS-Net's normalisation: RGB/255 - 0.5
        photo = Image.open(io.BytesIO(data)).convert("RGB")
        photo = photo.resize((SIZE, SIZE), Image.BILINEAR)
        return (np.asarray(photo, np.float32) / 255 - 0.5).transpose(2, 0, 1)[None].copy()

    with zipfile.ZipFile(wheel) as z:
        batches = [{input_name: tensor(z.read(f"skimage/data/{p}"))} for p in CALIBRATION_PHOTOS]

    class Photos(CalibrationDataReader):
        def __init__(self):
            self.left = iter(batches)

        def get_next(self):
            return next(self.left, None)

    for_tract = {"quant_format": QuantFormat.QOperator, "op_types_to_quantize": ["Conv"]}
    quantize_static(str(prepared), str(out), Photos(),
                    **(for_tract if engine == "tract" else {"quant_format": QuantFormat.QDQ}),
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax,
                    extra_options={"CalibMovingAverage": True})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, required=True, help="isnet.onnx, as fetched")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--engine", choices=["onnxruntime", "tract"], default="onnxruntime",
                    help="the engine whose format to write")
    ap.add_argument("--cache", type=Path, default=default_cache())
    ap.add_argument("--in-venv", type=Path, help=argparse.SUPPRESS)  # the calibration wheel
    args = ap.parse_args()
    if args.in_venv:
        import tempfile
        with tempfile.TemporaryDirectory() as scratch:
            quantize(args.source, args.out, args.in_venv, Path(scratch), args.engine)
        return
    wheel = calibration_wheel(args.cache)
    exe = venv_python(args.cache)
    subprocess.run([exe, __file__, "--source", args.source, "--out", args.out,
                    "--engine", args.engine, "--in-venv", wheel], check=True)


if __name__ == "__main__":
    main()
