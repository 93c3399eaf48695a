#!/usr/bin/env python3
"""The compute cost of each model: multiply-adds (MACs) of one run, as the
server runs it, at the input sizes it runs at.

    python3 bench/cost.py [--models isnet,isnet-int8,modnet,modnet-int8,u2netp]
                          [--engines onnxruntime,tract] [--threads 2]

For each models/<name>.<engine>.onnx it counts the MACs of Conv, ConvTranspose,
MatMul, Gemm and their quantised forms (QLinearConv, ConvInteger,
MatMulInteger, QLinearMatMul) from the real tensor shapes at one input size:
  Conv           N*Cout*Hout*Wout*(Cin/group)*kh*kw
  ConvTranspose  N*Cin*Hin*Win*(Cout/group)*kh*kw
  MatMul, Gemm   (batch dims)*M*K*N
The shapes come from one ONNX Runtime run on a zero tensor of that size,
with a Shape node on every operand counted made a graph output (small int64
results, so memory stays that of a normal run); only the nodes the first
output needs are run and counted, as the server selects that output alone
(IS-Net's and U2NetP's tract files also compute side outputs it drops). A
Conv whose weights are int8 (QLinearConv, ConvInteger, or a Conv fed by
DequantizeLinear, ONNX Runtime's QDQ form) counts as int8.
Left out: elementwise ops (Add, Mul, Relu, Clip, Sigmoid, Cast), resizes,
pooling (MaxPool, GlobalAveragePool), normalisation (BatchNormalization,
InstanceNormalization), (de)quantisation, concatenation and slicing: their
work is memory traffic, a few operations per value, not MACs.

It prints Markdown tables: each model at the sizes it runs at (GMACs and
MACs per input pixel), how far MACs per pixel move between two sizes (are
MACs linear in pixels?), and each pipeline's GMACs for a 4:3 12 MP photo
(4000x3000) and a 16:9 frame (854x480). The sizes follow the manifest's
input geometry, as src/engine/preprocess.rs (`input_layout`) computes them.
Runs in the pinned tools' venv (models/prepare.py); a few minutes on two
cores, most of it IS-Net at 1024x1024.
"""
import argparse, math, subprocess, sys, tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "models"))
from prepare import default_cache, venv_python  # noqa: E402

MODELS = ["isnet", "isnet-int8", "modnet", "modnet-int8", "u2netp"]
ENGINES = ["onnxruntime", "tract"]
PHOTOS = {"4:3 12 MP (4000x3000)": (4000, 3000), "16:9 (854x480)": (854, 480)}
# src/engine/preprocess.rs: MODNet's long side is at most 4 times its short.
MAX_ASPECT = 4
# The operand whose shape gives the MACs, by operator: (input index of the
# weights or B, "conv" | "convT" | "matmul" | "gemm").
COUNTED = {"Conv": (1, "conv"), "ConvInteger": (1, "conv"), "QLinearConv": (3, "conv"),
           "ConvTranspose": (1, "convT"), "MatMul": (1, "matmul"), "Gemm": (1, "gemm"),
           "MatMulInteger": (1, "matmul"), "QLinearMatMul": (3, "matmul")}
INT8 = {"ConvInteger", "QLinearConv", "MatMulInteger", "QLinearMatMul"}


def size(geometry, width, height):
    """The model's input (width, height) for a photo, as `input_layout` has it."""
    fit = geometry["fit"]
    if fit in ("squash", "letterbox"):
        return geometry["width"], geometry["height"]
    if fit == "padded":
        long, multiple = geometry["long_side"], geometry["multiple"]
        scale = long / max(width, height)
        fit = lambda side: min(max(math.floor(side * scale + 0.5), 1), long)
        return tuple(-(-fit(side) // multiple) * multiple for side in (width, height))
    if fit == "aspect":
        target, multiple = geometry["short_side"], geometry["multiple"]
        short, long = min(width, height), max(width, height)
        scale = 1.0 if short <= target <= long else target / short
        floor = lambda v: max(int(v) // multiple, 1) * multiple
        short_in = floor(short * scale)
        long_in = min(floor(long * scale), short_in * MAX_ASPECT)
        return (short_in, long_in) if width <= height else (long_in, short_in)
    raise ValueError(f"unknown fit {fit}")


def count(path, width, height, threads):
    """(MACs, int8 MACs, {op: nodes}) of one run of `path` at width x height."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper
    from prepare import declare_spatial_dims, drop_unneeded, image_input
    proto = onnx.load(path)
    graph = proto.graph
    del graph.output[1:]
    drop_unneeded(graph)
    image = image_input(graph)
    declare_spatial_dims(image, None)  # U2NetP's files say 256x256; it runs at any size
    producers = {o: n for n in graph.node for o in n.output}
    counted, shapes = [], {}
    for node in list(graph.node):
        if node.op_type not in COUNTED:
            continue
        weight, _ = COUNTED[node.op_type]
        operands = [node.input[0], node.input[weight], node.output[0]]
        for value in operands:
            if value not in shapes:
                shapes[value] = f"cost_shape{len(shapes)}"
                graph.node.append(helper.make_node("Shape", [value], [shapes[value]]))
                graph.output.append(helper.make_tensor_value_info(shapes[value], TensorProto.INT64, None))
        source = producers.get(node.input[weight])
        int8 = node.op_type in INT8 or (source is not None and source.op_type == "DequantizeLinear")
        counted.append((node, operands, int8))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    dims = image.type.tensor_type.shape.dim
    zeros = np.zeros((1, dims[1].dim_value, height, width),
                     ort_type(session.get_inputs()[0].type))
    names = list(shapes.values())
    got = dict(zip(names, session.run(names, {image.name: zeros})))
    macs = int8_macs = 0
    ops = {}
    for node, (x, w, y), int8 in counted:
        x, w, y = (got[shapes[v]].tolist() for v in (x, w, y))
        kind = COUNTED[node.op_type][1]
        if kind == "conv":  # w: [Cout, Cin/group, kh, kw]
            n = math.prod(y) * math.prod(w[1:])
        elif kind == "convT":  # w: [Cin, Cout/group, kh, kw]
            n = math.prod(x) * math.prod(w[1:])
        elif kind == "matmul":  # y: [batch..., M, N], K from A
            n = math.prod(y) * x[-1]
        else:  # Gemm: y [M, N], K from A as it is transposed or not
            trans_a = next((a.i for a in node.attribute if a.name == "transA"), 0)
            n = math.prod(y) * (x[0] if trans_a else x[1])
        macs += n
        int8_macs += n if int8 else 0
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    return macs, int8_macs, ops


def ort_type(name):
    import numpy as np
    return {"tensor(float)": np.float32, "tensor(float16)": np.float16}[name]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--threads", type=int, default=2, help="ONNX Runtime's threads")
    ap.add_argument("--cache", type=Path, default=default_cache())
    ap.add_argument("--in-venv", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.in_venv:
        sys.exit(subprocess.run([venv_python(args.cache), __file__, *sys.argv[1:], "--in-venv"]).returncode)
    manifest = tomllib.loads((ROOT / "models/manifest.toml").read_text())
    entries = {m["name"]: m for m in manifest["model"]}
    models, engines = args.models.split(","), args.engines.split(",")
    cache = {}

    def macs(name, engine, wh):
        if (name, engine, wh) not in cache:
            print(f"counting {name}.{engine}.onnx at {wh[0]}x{wh[1]}", file=sys.stderr, flush=True)
            cache[name, engine, wh] = count(ROOT / f"models/{name}.{engine}.onnx", *wh, args.threads)
        return cache[name, engine, wh]

    def geometry(name, engine):
        entry = entries[name]
        return entry.get(f"{engine}_input", entry["input"])

    def own(name, engine, photo):
        return size(geometry(name, engine), *photo)

    g = lambda n: f"{n / 1e9:.2f}"

    # Each model at the size a 4:3 photo runs at: its MACs per input pixel.
    usual = PHOTOS["4:3 12 MP (4000x3000)"]
    print("## Each model, one run\n")
    print("| model | engine's file | input (WxH) | GMACs | int8 share | MACs per input pixel | counted nodes |")
    print("|---|---|---|---|---|---|---|")
    for name in models:
        for engine in engines:
            wh = own(name, engine, usual)
            n, n8, ops = macs(name, engine, wh)
            nodes = ", ".join(f"{k} {v}" for k, v in sorted(ops.items()))
            print(f"| {name} | {engine} | {wh[0]}x{wh[1]} | {g(n)} | {n8 / n:.0%} | "
                  f"{n / (wh[0] * wh[1]):,.1f} | {nodes} |")

    # Linearity: MACs per pixel at the usual size and at a second one.
    second = {"isnet": (1024, 1024), "isnet-int8": (1024, 1024), "modnet": (672, 384),
              "modnet-int8": (672, 384), "u2netp": (320, 320)}
    print("\n## MACs per input pixel at two sizes\n")
    print("| model | engine's file | size A | MACs/px A | size B | MACs/px B | B/A - 1 |")
    print("|---|---|---|---|---|---|---|")
    for name in models:
        for engine in engines:
            a, b = own(name, engine, usual), second[name]
            if geometry(name, engine)["fit"] != "padded" and name.startswith("isnet"):
                print(f"| {name} | {engine} | 1024x1024 only (sizes fixed in the file) | | | | |")
                continue
            pa = macs(name, engine, a)[0] / (a[0] * a[1])
            pb = macs(name, engine, b)[0] / (b[0] * b[1])
            print(f"| {name} | {engine} | {a[0]}x{a[1]} | {pa:,.1f} | {b[0]}x{b[1]} | {pb:,.1f} | "
                  f"{pb / pa - 1:+.4%} |")

    # Pipelines: the runs a photo costs, by `type`.
    squash = entries["isnet"]["blend"]["inputs"][0]
    u2 = entries["isnet"]["blend"]["models"][0]
    pipelines = [
        ("auto (isnet configured)", ["isnet", ("isnet", squash), u2], ["modnet"]),
        ("auto (isnet-int8 configured)", ["isnet-int8", ("isnet-int8", squash), u2], ["modnet-int8"]),
        ("general", ["isnet"], []),
        ("person", ["modnet"], []),
    ] + [(f"{m} alone", [m], []) for m in MODELS]
    print("\n## GMACs per photo\n")
    print("Runs are `model@WxH`; `+ if asked` is the second opinion, run on some photos "
          "(with isnet-int8 configured, tract runs modnet-int8, ONNX Runtime modnet: "
          "src/engine/manifest.rs, `models_for`).\n")
    for engine in engines:
        for label, photo in PHOTOS.items():
            print(f"### {engine}, {label}\n")
            print("| pipeline | runs | GMACs | + if asked | runs if asked |")
            print("|---|---|---|---|---|")
            for pipeline, runs, asked in pipelines:
                if engine == "onnxruntime" and asked == ["modnet-int8"]:
                    asked = ["modnet"]
                if any((r if isinstance(r, str) else r[0]) not in models for r in runs + asked):
                    continue

                def total(runs):
                    sized = [(r, own(r, engine, photo)) if isinstance(r, str)
                             else (r[0], size(r[1], *photo)) for r in runs]
                    return (sum(macs(r, engine, wh)[0] for r, wh in sized),
                            " + ".join(f"{r}@{wh[0]}x{wh[1]}" for r, wh in sized))
                n, shown = total(runs)
                extra, extra_shown = total(asked) if asked else (0, "")
                print(f"| {pipeline} | {shown} | {g(n)} | {'+' + g(extra) if asked else ''} | {extra_shown} |")
            print()


if __name__ == "__main__":
    main()
