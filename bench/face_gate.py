#!/usr/bin/env python3
"""Can a face detector tell type=auto when to serve the person pipeline?

    python3 bench/face_gate.py [--binary target/release/cutout] [--engine onnxruntime]

MediaPipe's two BlazeFace detectors (short and full range, Apache-2.0, in
the mediapipe 0.10.14 wheel as TFLite files) are converted to ONNX with
tflite2onnx. The full range file keeps its weights sparse behind DENSIFY
and upsamples with DEPTH_TO_SPACE, which tflite2onnx lacks: the weights are
made dense at conversion, DEPTH_TO_SPACE becomes ONNX's DepthToSpace (DCR,
the same order on NCHW), and a paddings tensor several PADs share is
reordered once. Each dev photo is letterboxed to the detector's square in
[-1, 1] and its best face (score and box) kept. Every photo is cut out as
type=auto and type=person with `cutout remove`, and each gate is scored by
the shared tools as bench/eval.py scores: type=auto serving the person
pipeline where the gate fires, the general one elsewhere, against type=auto
today (dev/ppm and bench/people_scenes.py's scenes by matting_metrics.py at
a long side of 2048, the object sets by quality_metrics.py). A gate fires where a
detector's best face scores over its threshold and, with a cover, where the
person pipeline's matte covers that face's box at least that much.
Everything lands under target/eval/face-gate; the venv under ~/.cache.
"""
import argparse, hashlib, json, logging, os, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
OUT = ROOT / "target" / "eval" / "face-gate"
PACKAGES = ["tflite2onnx==0.4.1", "tflite==2.18.0", "onnx==1.23.2", "onnxruntime==1.31.1",
            "numpy==2.4.6", "pillow==12.3.0", "flatbuffers==25.12.19", "protobuf==7.36.2"]
VENV = Path.home() / ".cache" / "cutout-face-gate"
WHEEL = "mediapipe==0.10.14"
DETECTORS = {"short": ("face_detection_short_range", 128), "full": ("face_detection_full_range_sparse", 192)}
PEOPLE_SETS = ["ppm", "people-scenes"]
OBJECT_SETS = ["alphamatting", "grabcut", "coco_mval", "berkeley"]
SCENES = ROOT / "target" / "eval" / "people-scenes"
TODAY = (2, 2, None)  # scores are at most 1: fires on nothing
GATES = [  # (short, full, cover): score thresholds, and the matte's cover of the box
    TODAY, (2, 0.5, None), (0.6, 0.5, None), (0.5, 0.4, None), (2, 0.5, 0.5), (0.6, 0.5, 0.5),
]

if Path(sys.prefix) != VENV:
    if not (VENV / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([VENV / "bin" / "pip", "install", "-q", *PACKAGES], check=True)
    os.execv(VENV / "bin" / "python", [str(VENV / "bin" / "python"), __file__, *sys.argv[1:]])

import numpy as np, onnxruntime, tflite, tflite2onnx
from PIL import Image
from tflite2onnx import mapping
from tflite2onnx import graph as t2o_graph, tensor as t2o_tensor
from tflite2onnx.layout import Layout
from tflite2onnx.op.common import Operator, OpFactory
from tflite2onnx.op.padding import Padding

sys.path.insert(0, str(ROOT / "bench"))
from eval import inputs, score


class DepthToSpace(Operator):
    TypeMapping = {tflite.BuiltinOperator.DEPTH_TO_SPACE: "DepthToSpace"}

    def __init__(self, factory, index):
        super().__init__(factory, index)
        self.attrs["mode"] = "DCR"
        self.setInited()

    @property
    def type(self):
        return "DepthToSpace"

    def parse(self):
        self.parseInput(0, Layout("NHWC", "NCHW"))
        self.parseOutput(0, Layout("NHWC", "NCHW"))
        options, table = tflite.DepthToSpaceOptions(), self.tflite.BuiltinOptions()
        options.Init(table.Bytes, table.Pos)
        self.attrs["blocksize"] = options.BlockSize()
        self.setParsed()

    def propagatableTensors(self):
        return []

    def transform(self):
        pass


OpFactory.register(DepthToSpace)
# fp16 weights behind DEQUANTIZE are folded to f32 by tflite2onnx, which warns of each.
logging.getLogger("tflite2onnx").setLevel(logging.ERROR)


def dense(model, graph, index):
    """A sparse constant tensor (TFLite's SparsityParameters) made dense."""
    t = graph.Tensors(index)
    sp = t.Sparsity()
    dtype = mapping.DTYPE_ONNX2NAME[mapping.DTYPE_TFLITE2ONNX[t.Type()]]
    values = np.frombuffer(model.Buffers(t.Buffer()).DataAsNumpy().tobytes(), dtype=dtype)
    shape = [int(i) for i in t.ShapeAsNumpy()]
    order = [int(i) for i in sp.TraversalOrderAsNumpy()]
    block_map = [int(i) for i in sp.BlockMapAsNumpy()] if sp.BlockMapLength() else []
    metas = [sp.DimMetadata(i) for i in range(sp.DimMetadataLength())]
    rank = len(shape)

    def vector(table, kind):
        v = {1: tflite.Int32Vector, 2: tflite.Uint16Vector, 3: tflite.Uint8Vector}[kind]()
        v.Init(table.Bytes, table.Pos)
        return v.ValuesAsNumpy()

    csr = [(vector(m.ArraySegments(), m.ArraySegmentsType()),
            vector(m.ArrayIndices(), m.ArrayIndicesType())) if m.Format() == 1 else None
           for m in metas]
    block = {d: metas[order.index(rank + k)].DenseSize() for k, d in enumerate(block_map)}
    out = np.zeros(shape, dtype=dtype)

    def walk(level, pos, coord):
        if level == len(order):
            idx = [0] * rank
            for lvl, d in enumerate(order):
                if d < rank:
                    idx[d] += coord[lvl] * block.get(d, 1)
                else:
                    idx[block_map[d - rank]] += coord[lvl]
            out[tuple(idx)] = values[pos]
        elif csr[level] is None:
            n = metas[level].DenseSize()
            for i in range(n):
                walk(level + 1, pos * n + i, coord + [i])
        else:
            segments, indices = csr[level]
            for j in range(segments[pos], segments[pos + 1]):
                walk(level + 1, j, coord + [int(indices[j])])

    walk(0, 0, [])
    return out


def convert(src, dst):
    """tflite2onnx, with DENSIFY folded, DepthToSpace added and shared paddings reordered once."""
    model = tflite.Model.GetRootAsModel(src.read_bytes(), 0)
    graph = model.Subgraphs(0)
    densify = tflite.BuiltinOperator.DENSIFY
    folded = {}
    for i in range(graph.OperatorsLength()):
        op = graph.Operators(i)
        if model.OperatorCodes(op.OpcodeIndex()).BuiltinCode() == densify:
            folded[op.Outputs(0)] = dense(model, graph, op.Inputs(0))
    tensor_parse, pad_transform = t2o_tensor.Tensor.parse, Padding.transform

    def parse_tensor(self):
        first = not self.status.parsed
        tensor_parse(self)
        if first and self.index in folded and self.tflite is not None:
            self.data = folded[self.index]

    def parse_graph(self):
        for i in range(self.graph.OperatorsLength()):
            op = self.graph.Operators(i)
            if self.model.OperatorCodes(op.OpcodeIndex()).BuiltinCode() != densify:
                converter = self.OPCFactory.create(i)
                converter.parse()
                self.ops.append(converter)
        self.inputs += [self.TFactory.get(self.graph.Inputs(i)) for i in range(self.graph.InputsLength())]
        self.outputs += [self.TFactory.get(self.graph.Outputs(i)) for i in range(self.graph.OutputsLength())]
        self._collectOpAndTensor()
        self.setParsed()

    def pad_once(self):
        if len(self.inputs[1].shape) == 2:
            pad_transform(self)

    t2o_tensor.Tensor.parse, t2o_graph.Graph.parse, Padding.transform = parse_tensor, parse_graph, pad_once
    tflite2onnx.convert(str(src), str(dst))


def detectors():
    d = OUT / "models"
    d.mkdir(parents=True, exist_ok=True)
    sessions = {}
    for kind, (name, side) in DETECTORS.items():
        onnx = d / f"{name}.onnx"
        if not onnx.exists():
            wheels = list(d.glob("mediapipe-*.whl"))
            if not wheels:
                subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", d, WHEEL],
                               check=True)
                wheels = list(d.glob("mediapipe-*.whl"))
            subprocess.run(["unzip", "-o", "-q", "-j", wheels[0], f"mediapipe/modules/face_detection/{name}.tflite",
                            "-d", d], check=True)
            convert(d / f"{name}.tflite", onnx)
        sessions[kind] = (onnxruntime.InferenceSession(onnx), side, anchors(kind))
    return sessions


def anchors(kind):
    """BlazeFace's SSD anchor centres: 48² at stride 4 (full); 16² ×2 and 8² ×6 (short)."""
    if kind == "full":
        return np.array([((x + .5) / 48, (y + .5) / 48) for y in range(48) for x in range(48)])
    a = [((x + .5) / 16, (y + .5) / 16) for y in range(16) for x in range(16) for _ in range(2)]
    return np.array(a + [((x + .5) / 8, (y + .5) / 8) for y in range(8) for x in range(8) for _ in range(6)])


def best_face(im, session, side, centres):
    """[score, cx, cy, w, h] of the highest-scoring box, in the photo's [0, 1] coordinates."""
    w, h = im.size
    s = side / max(w, h)
    nw, nh = max(1, round(w * s)), max(1, round(h * s))
    x0, y0 = (side - nw) // 2, (side - nh) // 2
    a = np.zeros((side, side, 3), np.float32)
    a[y0:y0 + nh, x0:x0 + nw] = np.asarray(im.resize((nw, nh), Image.BILINEAR), np.float32) / 127.5 - 1
    reg, cls = session.run(None, {session.get_inputs()[0].name: a.transpose(2, 0, 1)[None]})
    i = int(cls[0, :, 0].argmax())
    score = 1 / (1 + np.exp(-np.clip(cls[0, i, 0], -100, 100)))
    cx = (centres[i][0] * side + reg[0, i, 0] - x0) / nw
    cy = (centres[i][1] * side + reg[0, i, 1] - y0) / nh
    return [float(score), float(cx), float(cy), float(reg[0, i, 2] / nw), float(reg[0, i, 3] / nh)]


def cut_outs(binary, engine, name, photos):
    for subject in ("auto", "person"):
        d = OUT / engine / f"{name}-{subject}"
        d.mkdir(parents=True, exist_ok=True)
        todo = [p for p in photos if not (d / (p.stem + ".png")).exists()]
        if todo:
            subprocess.run([binary, "--models-dir", ROOT / "models", "remove", *todo, d, "--engine", engine,
                            "--type", subject], check=True, stderr=subprocess.DEVNULL)


def covers(engine, name, stem, faces):
    """How much of each face's box the person pipeline's matte holds, 0 to 1."""
    a = np.asarray(Image.open(OUT / engine / f"{name}-person" / f"{stem}.png").getchannel("A"), np.float32) / 255
    h, w = a.shape
    out = {}
    for kind, (_, cx, cy, bw, bh) in faces.items():
        x0, x1 = int(max(0, (cx - bw / 2) * w)), int(min(w, (cx + bw / 2) * w) + 1)
        y0, y1 = int(max(0, (cy - bh / 2) * h)), int(min(h, (cy + bh / 2) * h) + 1)
        out[kind] = float(a[y0:y1, x0:x1].mean()) if x1 > x0 and y1 > y0 else 0.0
    return out


def gate_scores(engine, name, chosen):
    """The shared tool's figures for the set, each photo cut out as `chosen` says."""
    pred = OUT / engine / "gates" / name / hashlib.sha256(json.dumps(chosen).encode()).hexdigest()[:16]
    if not pred.exists():
        pred.mkdir(parents=True)
        for stem, subject in chosen:
            (pred / f"{stem}.png").symlink_to(OUT / engine / f"{name}-{subject}" / f"{stem}.png")
    if name in PEOPLE_SETS:
        set_dir = SCENES if name == "people-scenes" else SHARED / "eval" / "dev" / name
        return score(sys.executable, set_dir, pred, "matting_metrics.py", "--long-side", "2048")
    return score(sys.executable, SHARED / "eval" / "dev" / name, pred)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=ROOT / "target" / "release" / "cutout")
    ap.add_argument("--engine", default="onnxruntime")
    args = ap.parse_args()
    sessions = detectors()
    photos, records = {}, {}
    subprocess.run([sys.executable, ROOT / "bench" / "people_scenes.py", SCENES], check=True,
                   stdout=subprocess.DEVNULL)
    for name in [*PEOPLE_SETS, *OBJECT_SETS]:
        photos[name] = (sorted((SCENES / "images").iterdir()) if name == "people-scenes"
                        else inputs(sys.executable, name))
        cut_outs(args.binary, args.engine, name, photos[name])
        records[name] = []
        for p in photos[name]:
            im = Image.open(p).convert("RGB")
            faces = {k: best_face(im, *sessions[k]) for k in sessions}
            records[name].append({"stem": p.stem, "faces": faces, "cover": covers(args.engine, name, p.stem, faces)})
        print(f"{name}: {len(photos[name])} photos looked at", file=sys.stderr, flush=True)
    (OUT / "photos.json").write_text(json.dumps(records))

    def fires(r, gate):
        return any(r["faces"][k][0] >= t and (gate[2] is None or r["cover"][k] >= gate[2])
                   for k, t in zip(("short", "full"), gate[:2]))

    print("| gate: short, full, cover | " + " | ".join([f"{s}: fired, MSE, MAD, Grad/1000" for s in PEOPLE_SETS] +
          [f"{s}: fired, MAE, IoU" for s in OBJECT_SETS]) + " |")
    print("|---|" + "---|" * (len(PEOPLE_SETS) + len(OBJECT_SETS)))
    for gate in GATES:
        cells = []
        for name in [*PEOPLE_SETS, *OBJECT_SETS]:
            chosen = [(r["stem"], "person" if fires(r, gate) else "auto") for r in records[name]]
            figures = gate_scores(args.engine, name, chosen)
            keys = ("mse", "mad", "grad_k") if name in PEOPLE_SETS else ("mae", "iou")
            fired = sum(subject == "person" for _, subject in chosen)
            cells.append(f"{fired}, " + ", ".join(str(figures[k]) for k in keys))
        label = "none (type=auto today)" if gate == TODAY else ", ".join(map(str, gate))
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
