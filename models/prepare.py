#!/usr/bin/env python3
"""Prepare a model for one engine: the ONNX graph rewrites it needs, made
once with the pinned onnx library, so that each engine loads its file as it
is (docs/decisions/0004-model-preparation.md).

    python3 models/prepare.py --engine onnxruntime --fp16 \\
        --source models/isnet.onnx --out models/isnet.onnxruntime.onnx
    python3 models/prepare.py --engine tract --size 256x256 \\
        --source models/u2netp.onnx --out models/u2netp.tract.onnx

`make models` (models/fetch.py) runs this for every engine a model lists
under `prepared` in models/manifest.toml, and checks each file against the
sha256 there, in a venv of the pinned TOOLS below (made under the cache on
first use).

For both engines, a model run at another size than its file declares
(IS-Net at the photo's aspect, U2NetP at 256x256) is declared at that
size, or at any size, and each upsample to a size traced at export is made
an upsample to the size of the tensor it is joined to, or of the input for
the output's own, as IS-Net's PyTorch source (`_upsample_like(src, tar)`)
has it: its file only runs at 1024x1024, the graph itself at any size.
U2NetP's export already takes its upsample sizes from the shapes at run
time. ONNX Runtime's int8 IS-Net stays at its file's size: its quantiser
folded the sizes into constants, and it lost quality at other sizes.
tract's is quantised from the graph this rewrite made (models/quantize.py).

For ONNX Runtime, so that it runs what tract runs and nothing more:
- Only the first output is kept, with the nodes it needs. IS-Net also
  computes five deep-supervision mattes, each upsampled to 1024x1024, that
  nothing reads; tract skips them once told the one output wanted.
- fp16 is widened to f32. IS-Net's file keeps its weights in fp16 and casts
  its input and some activations to fp16, so ONNX Runtime would round them
  to 11 significant bits on the way; tract converts the graph to f32 as it
  plans (it is slow at fp16). With the same f32 graph the engines agree
  (tests/api/engines.rs) and ONNX Runtime is no slower.
- Linear Resizes with `pytorch_half_pixel` coordinates say `half_pixel`.
  ONNX Runtime runs convolutions on channels in blocks of 8 or 16 (NCHWc)
  and keeps an upsample in that layout only with `half_pixel`; otherwise
  each one converts the layout out and back. U2NetP has 38 of them: its run
  takes 12% less time (BENCHMARKS.md, "ONNX Runtime's layout"). The two
  modes differ only where a side shrinks to one pixel, which no upsample
  does.
- A convolution over a concatenation of channels whose parts are not whole
  blocks runs as one convolution a part, summed: `W * [a, b] = W_a * a +
  W_b * b`. Such a concatenation cannot stay in blocks, so ONNX Runtime ran
  the convolution in plain layout: MODNet joins its features with the 3
  channels of the photo three times, and the one at full size took 19 of
  its 160 ms; split, its run takes 6% less time (BENCHMARKS.md, "ONNX
  Runtime's layout"). The channels of each part are worked out from the
  weights and the declared input, through the operators that keep or join
  channels; where they cannot be, nothing is split.
tract's file gets the size rewrite alone: it keeps the fp16 weights (half
the memory while the model is parsed) and its own plan drops the side
outputs; a split convolution would change its plan.

Subgraphs (If, Loop) are not visited: the models here have none.
"""
import argparse, hashlib, os, subprocess, sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The tools this and models/quantize.py run with, pinned with everything
# they import: the same bytes from the same inputs.
TOOLS = ["onnx==1.23.2", "onnxruntime==1.31.1", "numpy==2.4.6", "pillow==13.0.0",
         "protobuf==7.36.2", "ml_dtypes==0.6.0", "flatbuffers==25.12.19",
         "packaging==26.3", "typing_extensions==4.16.0"]
# ONNX Runtime's channel block: 8 with AVX2, 16 with AVX-512.
BLOCK = 16
# Nodes a value passes through unchanged in size on its way from an upsample
# to the concatenation that joins it (IS-Net's fp16 casts).
SIZE_KEEPING = {"Cast"}
# Operators whose output has their first input's channels.
CHANNEL_KEEPING = {"Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "BatchNormalization",
                   "InstanceNormalization", "Resize", "Upsample", "MaxPool", "AveragePool",
                   "Identity"}


class PrepareError(Exception):
    pass


def default_cache():
    """Where fetched packages and the tools' venv are kept."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cutout"


def venv_python(cache):
    """The pinned tools' interpreter, made under `cache` on first use."""
    venv = cache / ("tools-" + hashlib.sha256(" ".join(TOOLS).encode()).hexdigest()[:12])
    exe = venv / "bin" / "python"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([exe, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--no-deps", *TOOLS], check=True)
    return exe


def arguments(model):
    """This script's arguments for `model`, a manifest entry: the one input
    size of a fixed-size model (none for one run at the photo's aspect),
    and whether its file is fp16."""
    geometry, args = model["input"], []
    if geometry["fit"] in ("squash", "letterbox"):
        args += ["--size", f"{geometry['width']}x{geometry['height']}"]
    return args + (["--fp16"] if model["fp16"] else [])


def prepare(proto, engine, fp16, size):
    """`proto` (an onnx ModelProto) rewritten in place for `engine`."""
    graph = proto.graph
    if engine == "onnxruntime":
        keep_first_output(graph)
        plain_half_pixel(graph)
        if fp16:
            widen_fp16(graph)
        split_convolutions_over_concats(graph)
    fit_input(graph, size)


def attribute(node, name):
    return next((a for a in node.attribute if a.name == name), None)


def int_attribute(node, name):
    a = attribute(node, name)
    return None if a is None else a.i


def values(tensor):
    from onnx import numpy_helper
    return numpy_helper.to_array(tensor).flatten().tolist()


def int_constants(graph):
    """The graph's int64 constants, initializers and Constant nodes, by name."""
    from onnx import TensorProto
    constants = {t.name: values(t) for t in graph.initializer if t.data_type == TensorProto.INT64}
    for node in graph.node:
        value = attribute(node, "value") if node.op_type == "Constant" else None
        if value is not None and value.HasField("t") and value.t.data_type == TensorProto.INT64:
            constants[node.output[0]] = values(value.t)
    return constants


def image_input(graph):
    """The graph's first input that is not a weight: the image."""
    weights = {t.name for t in graph.initializer}
    return next((i for i in graph.input if i.name not in weights), None)


def spatial_dims(info):
    """A declared NCHW value's [height, width], where both are numbers."""
    if info is None or not info.type.HasField("tensor_type"):
        return None
    dims = info.type.tensor_type.shape.dim
    if len(dims) != 4 or not all(d.WhichOneof("value") == "dim_value" for d in dims[2:]):
        return None
    return [d.dim_value for d in dims[2:]]


def declare_spatial_dims(info, size):
    """Declares an NCHW value's height and width: `size`, or free if None."""
    if not info.type.HasField("tensor_type") or not info.type.tensor_type.HasField("shape"):
        return
    dims = info.type.tensor_type.shape.dim
    if len(dims) != 4:
        return
    for k, dim in enumerate(dims[2:]):
        if size is None:
            dim.dim_param = ("height", "width")[k]
        else:
            dim.dim_value = size[k]


def fit_input(graph, size):
    """The graph made to run at `size` (width, height), or at any size if
    None. One run at its file's own size is left as exported."""
    wanted = None if size is None else [size[1], size[0]]
    if spatial_dims(image_input(graph)) == wanted:
        return
    sizes_from_targets(graph)
    image = image_input(graph)
    if image is None:
        raise PrepareError("the graph has no input")
    for info in graph.input:
        if info.name == image.name:
            declare_spatial_dims(info, wanted)
    for info in graph.output:
        declare_spatial_dims(info, None)


def sizes_from_targets(graph):
    """Every Resize whose `sizes` are a constant height and width joined to
    its input's batch and channels takes them from its target instead: the
    other input of the concatenation its output is joined by, or else the
    graph's input where they are the declared input size. Sizes worked out
    otherwise are left to do so at run time (U2NetP's come from its values'
    shapes). An error where the sizes are one constant or an upsample's
    target cannot be found: the model cannot run at other sizes."""
    from onnx import TensorProto, helper
    image = image_input(graph)
    if image is None:
        raise PrepareError("the graph has no input")
    declared, image = spatial_dims(image), image.name
    constants = int_constants(graph)
    producers = {o: n for n in graph.node for o in n.output}
    readers = {}
    for node in graph.node:
        for i in node.input:
            readers.setdefault(i, []).append(node)

    def traced(sizes):
        """The traced height and width, joined to the input's batch and channels."""
        join = producers.get(sizes)
        if join is None or join.op_type != "Concat" or len(join.input) != 2:
            return None
        hw = constants.get(join.input[1])
        return hw if hw is not None and len(hw) == 2 else None

    retargets = []  # (the Resize's index, its source, its target)
    for index, resize in enumerate(graph.node):
        if resize.op_type != "Resize" or len(resize.input) < 4 or not resize.input[3]:
            continue
        sizes = resize.input[3]
        baked = traced(sizes)
        if baked is None:
            if sizes in constants:
                raise PrepareError(f"{resize.name}: its sizes are one constant")
            continue
        value = resize.output[0]
        while True:
            after = readers.get(value, [])
            if len(after) == 1 and after[0].op_type in SIZE_KEEPING:
                value = after[0].output[0]
                continue
            if len(after) == 1 and after[0].op_type == "Concat" and len(after[0].input) == 2:
                join = after[0]
                target = join.input[1] if join.input[0] == value else join.input[0]
            else:
                target = image if baked == declared else None
            break
        if target is None:
            raise PrepareError(f"{resize.name}: what it upsamples to is not known")
        retargets.append((index, resize.input[0], target))

    def shape_slice(of, start, end, name):
        graph.node.append(helper.make_node("Shape", [of], [f"{name}_shape"], name=f"{name}_shape"))
        graph.node.append(helper.make_node("Slice", [f"{name}_shape", start, end, "any_size_0"],
                                           [name], name=name))

    for k, (index, source, target) in enumerate(retargets):
        kept, size, sizes = f"any_size{k}_batch_channels", f"any_size{k}_height_width", f"any_size{k}_sizes"
        shape_slice(source, "any_size_0", "any_size_2", kept)
        shape_slice(target, "any_size_2", "any_size_4", size)
        graph.node.append(helper.make_node("Concat", [kept, size], [sizes], name=sizes, axis=0))
        graph.node[index].input[3] = sizes
    for v in (0, 2, 4):
        graph.initializer.append(helper.make_tensor(f"any_size_{v}", TensorProto.INT64, [1], [v]))
    # The traced sizes, and the traced shapes of the values between, are
    # now unused or wrong.
    drop_unneeded(graph)
    del graph.value_info[:]


def keep_first_output(graph):
    del graph.output[1:]
    drop_unneeded(graph)


def drop_unneeded(graph):
    """Drops the nodes and initializers no output needs."""
    needed = {o.name for o in graph.output}
    # Producers are not always listed before their consumers (IS-Net's
    # casts come last), so sweep until nothing more is needed.
    keep, grew = [False] * len(graph.node), True
    while grew:
        grew = False
        for i in reversed(range(len(graph.node))):
            if not keep[i] and needed.intersection(graph.node[i].output):
                keep[i] = grew = True
                needed.update(graph.node[i].input)
    retain(graph.node, lambda i, _: keep[i])
    retain(graph.initializer, lambda _, t: t.name in needed)
    retain(graph.value_info, lambda _, v: v.name in needed)


def retain(repeated, wanted):
    """Keeps the items of a protobuf repeated field that `wanted(index, item)` says, in order."""
    kept = [item for i, item in enumerate(repeated) if wanted(i, item)]
    if len(kept) != len(repeated):
        copies = [type(item)() for item in kept]
        for copy, item in zip(copies, kept):
            copy.CopyFrom(item)
        del repeated[:]
        repeated.extend(copies)


def plain_half_pixel(graph):
    for node in graph.node:
        if node.op_type != "Resize":
            continue
        for a in node.attribute:
            if a.name == "coordinate_transformation_mode" and a.s == b"pytorch_half_pixel":
                a.s = b"half_pixel"


def widen_fp16(graph):
    from onnx import TensorProto
    for t in graph.initializer:
        widen_tensor(t)
    for node in graph.node:
        for a in node.attribute:
            if a.name == "to" and a.i == TensorProto.FLOAT16:
                a.i = TensorProto.FLOAT
            if a.HasField("t"):
                widen_tensor(a.t)
    for info in [*graph.input, *graph.output, *graph.value_info]:
        if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type == TensorProto.FLOAT16:
            info.type.tensor_type.elem_type = TensorProto.FLOAT


def widen_tensor(tensor):
    import numpy as np
    from onnx import TensorProto, numpy_helper
    if tensor.data_type == TensorProto.FLOAT16:
        tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float32),
                                                tensor.name))


def split_convolutions_over_concats(graph):
    from onnx import helper
    splits = plan_splits(graph)
    if not splits:
        return
    concats = {concat for concat, _, _ in splits.values()}
    nodes = []
    for index, conv in enumerate(graph.node):
        if index in concats:
            continue
        if index not in splits:
            nodes.append(conv)
            continue
        _, inputs, weights = splits[index]
        out, parts = conv.output[0], []
        for k, (source, weight) in enumerate(zip(inputs, weights)):
            name, part = f"{out}_part{k}_weight", f"{out}_part{k}"
            weight.name = name
            graph.initializer.append(weight)
            node = type(conv)()
            node.CopyFrom(conv)
            node.name = part
            del node.input[:]
            node.input.extend([source, name] + (conv.input[2:3] if k == 0 else []))  # the bias, once
            del node.output[:]
            node.output.append(part)
            nodes.append(node)
            parts.append(part)
        total = parts[0]
        for k, part in enumerate(parts[1:], 1):
            name = out if k + 1 == len(parts) else f"{out}_sum{k}"
            nodes.append(helper.make_node("Add", [total, part], [name], name=name))
            total = name
    copies = []
    for node in nodes:
        copies.append(type(node)())
        copies[-1].CopyFrom(node)
    del graph.node[:]
    graph.node.extend(copies)
    used = {i for n in graph.node for i in n.input}
    retain(graph.initializer, lambda _, t: t.name in used)


def plan_splits(graph):
    """The convolutions to split, by index: (the concatenation's index, its
    inputs, the weights of each part)."""
    weights = {t.name: t for t in graph.initializer}
    known = channels(graph, weights)
    readers = {}
    for i in (i for n in graph.node for i in n.input):
        readers[i] = readers.get(i, 0) + 1
    producers = {o: i for i, n in enumerate(graph.node) for o in n.output}
    splits = {}
    for index, conv in enumerate(graph.node):
        if conv.op_type != "Conv" or int_attribute(conv, "group") not in (None, 1):
            continue
        concat = producers.get(conv.input[0]) if conv.input else None
        if concat is None:
            continue
        node = graph.node[concat]
        parts = [known.get(i) for i in node.input]
        weight = weights.get(conv.input[1]) if len(conv.input) > 1 else None
        if None in parts or weight is None:
            continue
        # Only where the concatenation is what keeps the convolution out of
        # blocks: its parts unaligned, its output whole blocks.
        if (node.op_type != "Concat" or int_attribute(node, "axis") != 1
                or readers.get(conv.input[0]) != 1 or all(c % BLOCK == 0 for c in parts)
                or not weight.dims or weight.dims[0] % BLOCK != 0):
            continue
        sliced = slice_input_channels(weight, parts)
        if sliced is not None:
            splits[index] = (concat, list(node.input), sliced)
    return splits


def slice_input_channels(weight, parts):
    """A convolution's f32 weights [out, in, kh, kw] cut along `in` into `parts`."""
    from onnx import TensorProto, numpy_helper
    if weight.data_type != TensorProto.FLOAT or len(weight.dims) != 4 or sum(parts) != weight.dims[1]:
        return None
    values = numpy_helper.to_array(weight)
    starts = [sum(parts[:k]) for k in range(len(parts))]
    return [numpy_helper.from_array(values[:, s:s + p].copy()) for s, p in zip(starts, parts)]


def channels(graph, weights):
    """The number of channels (dimension 1) of every tensor that can be told
    without running the graph: from the declared inputs, the convolutions'
    weights, and the operators in between that keep or join channels."""
    known = {}
    for info in graph.input:
        dims = info.type.tensor_type.shape.dim if info.type.HasField("tensor_type") else []
        if len(dims) > 1 and dims[1].WhichOneof("value") == "dim_value":
            known[info.name] = dims[1].dim_value
    constants = int_constants(graph)
    # Producers may be listed after their consumers: sweep until nothing is learnt.
    learnt = True
    while learnt:
        learnt = False
        for node in graph.node:
            if not node.output or node.output[0] in known:
                continue
            of = [known.get(i) for i in node.input]
            count = None
            if node.op_type == "Conv":
                weight = weights.get(node.input[1]) if len(node.input) > 1 else None
                count = weight.dims[0] if weight is not None and weight.dims else None
            elif node.op_type == "Concat" and int_attribute(node, "axis") == 1:
                count = None if None in of else sum(of)
            elif node.op_type == "Slice":
                count = of[0] and sliced_channels(node, of[0], constants)
            elif node.op_type in CHANNEL_KEEPING:
                count = of[0] if of else None
            if count is not None:
                known[node.output[0]] = count
                learnt = True
    return known


def sliced_channels(node, channels, constants):
    """What a Slice leaves of `channels` channels, where its bounds are constants."""
    constant = lambda i: constants.get(node.input[i]) if i < len(node.input) else None
    starts, ends = constant(1), constant(2)
    if starts is None or ends is None:
        return None
    axes = constant(3) if len(node.input) > 3 else list(range(len(starts)))
    if axes is None:
        return None
    if 1 not in axes:
        return channels
    k = axes.index(1)
    if len(node.input) > 4:
        steps = constant(4)
        if steps is None or k >= len(steps) or steps[k] != 1:
            return None  # steps other than 1
    if k >= len(starts) or k >= len(ends):
        return None
    clamp = lambda v: min(max(v + channels if v < 0 else v, 0), channels)
    return max(clamp(ends[k]) - clamp(starts[k]), 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", required=True, choices=["tract", "onnxruntime"])
    ap.add_argument("--source", type=Path, required=True, help="the model's file, as fetched")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--size", metavar="WxH", help="its one input size (default: any size)")
    ap.add_argument("--fp16", action="store_true", help="its weights are fp16")
    args = ap.parse_args()
    import onnx
    size = tuple(int(v) for v in args.size.split("x")) if args.size else None
    proto = onnx.load(args.source)
    try:
        prepare(proto, args.engine, args.fp16, size)
    except PrepareError as e:
        sys.exit(f"error: {args.source.name} for {args.engine}: {e}")
    args.out.write_bytes(proto.SerializeToString())


if __name__ == "__main__":
    main()
