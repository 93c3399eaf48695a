#!/usr/bin/env python3
"""models/prepare.py's rewrites, and quantize.py's ranges and sizes, on
small graphs made here; they run in the pinned tools' venv (made on first
use). `make test-models` runs them; tests/api/engines.rs checks the
prepared models themselves, on both engines.

    python3 models/test_prepare.py
"""
import os, sys, unittest
from pathlib import Path

import prepare


def node(op, inputs, output, **attributes):
    from onnx import helper
    return helper.make_node(op, inputs, [output], **attributes)


def named(name):
    from onnx import ValueInfoProto
    return ValueInfoProto(name=name)


def floats(name, dims):
    import numpy as np
    from onnx import numpy_helper
    return numpy_helper.from_array(np.arange(np.prod(dims), dtype=np.float32).reshape(dims), name)


def image_input(height=None, width=None):
    """NCHW with 3 channels; its height and width declared where given."""
    from onnx import TensorProto, helper
    shape = ["batch", 3] + ([height, width] if height else [])
    return helper.make_tensor_value_info("image", TensorProto.FLOAT, shape)


def int64_constant(output, values):
    from onnx import TensorProto, helper
    return node("Constant", [], output,
                value=helper.make_tensor("v", TensorProto.INT64, [len(values)], values))


def graph(nodes, inputs=(), outputs=(), initializers=(), value_info=()):
    from onnx import GraphProto
    g = GraphProto()
    g.node.extend(nodes)
    g.input.extend(inputs)
    g.output.extend(outputs)
    g.initializer.extend(initializers)
    g.value_info.extend(value_info)
    return g


def made(g, output):
    return next(n for n in g.node if n.output[0] == output)


def upsampled_to_traced_sizes():
    """IS-Net's pattern at a declared 64x64: a deep value upsampled to the
    traced size of the encoder's (half the input's, 32x32) and joined to it
    through a cast, and the output upsampled to the traced input size."""
    image = image_input(64, 64)
    output = image_input(64, 64)
    output.name = "matte"
    return graph([
        node("Conv", ["image", "w"], "encoded"),
        node("MaxPool", ["encoded"], "deep"),
        node("Shape", ["deep"], "deep_shape"),
        node("Slice", ["deep_shape", "zero", "two", "zero"], "batch_channels"),
        int64_constant("traced", [32, 32]),
        node("Concat", ["batch_channels", "traced"], "sizes"),
        node("Resize", ["deep", "", "", "sizes"], "up"),
        node("Cast", ["up"], "up_cast"),
        node("Concat", ["up_cast", "encoded"], "joined"),
        node("Resize", ["joined", "", "", "sizes_out"], "matte"),
        int64_constant("traced_out", [64, 64]),
        node("Concat", ["batch_channels", "traced_out"], "sizes_out"),
    ], inputs=[image], outputs=[output], value_info=[named("deep")])


def photo_joined_to_features():
    """The photo (3 channels) joined to 16 channels of features, then
    convolved to 16: MODNet's pattern."""
    return graph([
        node("Conv", ["joined", "w2", "b2"], "out"),
        node("Concat", ["features", "image"], "joined", axis=1),
        node("Conv", ["image", "w1"], "features"),
    ], inputs=[image_input()], outputs=[named("out")],
        initializers=[floats("w1", [16, 3, 3, 3]), floats("w2", [16, 19, 3, 3]), floats("b2", [16])])


class Prepare(unittest.TestCase):
    def test_only_the_first_output_and_what_it_needs_are_kept(self):
        from onnx import TensorProto
        g = graph([
            node("Sigmoid", ["features"], "d1"),
            node("Conv", ["features", "w2"], "side"),
            node("Sigmoid", ["side"], "d2"),
            node("Conv", ["input", "w1"], "features"),
        ], outputs=[named("d1"), named("d2")],
            initializers=[TensorProto(name="w1"), TensorProto(name="w2")])
        prepare.keep_first_output(g)
        self.assertEqual([n.output[0] for n in g.node], ["d1", "features"], "kept in their order")
        self.assertEqual([t.name for t in g.initializer], ["w1"])
        self.assertEqual(len(g.output), 1)

    def test_resizes_say_half_pixel_for_pytorch_half_pixel(self):
        mode = "coordinate_transformation_mode"
        g = graph([node("Resize", ["x"], "y", **{mode: "pytorch_half_pixel"}),
                   node("Resize", ["x"], "y", **{mode: "align_corners"}),
                   node("Other", ["x"], "y", **{mode: "pytorch_half_pixel"})])
        prepare.plain_half_pixel(g)
        self.assertEqual([n.attribute[0].s for n in g.node],
                         [b"half_pixel", b"align_corners", b"pytorch_half_pixel"])

    def test_upsamples_take_the_size_of_what_they_are_joined_to(self):
        g = upsampled_to_traced_sizes()
        prepare.fit_input(g, None)

        def sizes_of(resized):
            """A Resize's sizes: the (batch, channels) of its source's shape
            and the (height, width) of its target's."""
            sizes = made(g, made(g, resized).input[3])
            self.assertEqual(sizes.op_type, "Concat")

            def shape_of(part):
                part = made(g, part)
                self.assertEqual(part.op_type, "Slice")
                shape = made(g, part.input[0])
                self.assertEqual(shape.op_type, "Shape")
                return shape.input[0]
            return shape_of(sizes.input[0]), shape_of(sizes.input[1])

        self.assertEqual(sizes_of("up"), ("deep", "encoded"), "joined to `encoded`")
        self.assertEqual(sizes_of("matte"), ("joined", "image"), "the output: the input's size")
        outputs = {n.output[0] for n in g.node}
        self.assertFalse({"traced", "sizes"} & outputs, "the traced sizes are gone")
        self.assertEqual(len(g.value_info), 0, "traced shapes are dropped")
        self.assertIsNone(prepare.spatial_dims(g.input[0]), "the input's size is free")

    def test_a_fixed_size_is_declared_and_the_declared_size_changes_nothing(self):
        g = upsampled_to_traced_sizes()
        prepare.fit_input(g, (64, 64))
        self.assertEqual(g, upsampled_to_traced_sizes(), "already 64x64")
        prepare.fit_input(g, (48, 32))
        self.assertEqual(prepare.spatial_dims(g.input[0]), [32, 48])
        self.assertIsNone(prepare.spatial_dims(g.output[0]), "the output's is free")
        self.assertEqual(made(g, "up").input[3], "any_size0_sizes", "traced sizes are retargeted")

    def test_sizes_worked_out_at_run_time_are_left_and_one_constant_is_an_error(self):
        # U2NetP's pattern: the sizes come from the target's shape.
        g = upsampled_to_traced_sizes()
        prepare.retain(g.node, lambda _, n: n.output[0] != "traced")
        g.node.extend([node("Shape", ["encoded"], "encoded_shape"),
                       node("Slice", ["encoded_shape", "two", "four", "zero"], "traced")])
        prepare.fit_input(g, None)
        self.assertEqual(made(g, "up").input[3], "sizes", "left as exported")

        from onnx import TensorProto, helper
        g = upsampled_to_traced_sizes()
        g.initializer.append(helper.make_tensor("one_constant", TensorProto.INT64, [4], [1, 3, 32, 32]))
        made(g, "up").input[3] = "one_constant"
        with self.assertRaisesRegex(prepare.PrepareError, "its sizes are one constant"):
            prepare.fit_input(g, None)

    def test_an_upsample_to_an_unknown_target_is_an_error(self):
        g = upsampled_to_traced_sizes()
        # The joined value read by two nodes: what it upsamples to is unclear.
        g.node.append(node("Sigmoid", ["up_cast"], "elsewhere"))
        with self.assertRaisesRegex(prepare.PrepareError, "what it upsamples to is not known"):
            prepare.sizes_from_targets(g)

    def test_a_convolution_over_unaligned_channels_runs_a_part_at_a_time(self):
        from onnx import numpy_helper
        g = photo_joined_to_features()
        prepare.split_convolutions_over_concats(g)
        self.assertEqual([(n.op_type, list(n.input)) for n in g.node], [
            ("Conv", ["features", "out_part0_weight", "b2"]),
            ("Conv", ["image", "out_part1_weight"]),
            ("Add", ["out_part0", "out_part1"]),
            ("Conv", ["image", "w1"]),
        ])
        self.assertEqual(list(g.node[2].output), ["out"])
        weights = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        self.assertNotIn("w2", weights, "unused")
        # w2's filter for output o starts at o * 19 * 9: the features' 16
        # channels first, then the photo's 3.
        features, photo = weights["out_part0_weight"], weights["out_part1_weight"]
        self.assertEqual((features.shape, photo.shape), ((16, 16, 3, 3), (16, 3, 3, 3)))
        features, photo = features.flatten(), photo.flatten()
        self.assertEqual(list(features[:2]), [0.0, 1.0])
        self.assertEqual(features[144], 171.0, "output 1's first weight")
        self.assertEqual(photo[0], 144.0, "after 16 channels of 9")
        self.assertEqual(photo[27], 171.0 + 144.0)

    def test_aligned_or_unknown_channels_are_left_joined(self):
        aligned = photo_joined_to_features()
        aligned.node[1].input[:] = ["features", "features"]
        aligned.initializer[1].CopyFrom(floats("w2", [16, 32, 3, 3]))
        unknown = photo_joined_to_features()
        del unknown.input[:]
        for g in (aligned, unknown):
            before = type(g)()
            before.CopyFrom(g)
            prepare.split_convolutions_over_concats(g)
            self.assertEqual(g, before)

    def test_channels_follow_slices_joins_and_activations(self):
        from onnx import TensorProto, helper
        end = helper.make_tensor("v", TensorProto.INT64, [1], [2**63 - 1])
        g = graph([
            node("Relu", ["joined"], "relu"),
            node("Concat", ["half", "image"], "joined", axis=1),
            node("Slice", ["features", "start", "end", "axis"], "half"),
            int64_constant("start", [8]),
            node("Constant", [], "end", value=end),
            int64_constant("axis", [1]),
            node("Conv", ["image", "w1"], "features"),
        ], inputs=[image_input()], initializers=[floats("w1", [16, 3, 3, 3])])
        known = prepare.channels(g, {t.name: t for t in g.initializer})
        self.assertEqual((known.get("features"), known.get("half"), known.get("relu")), (16, 8, 11))

    def test_fp16_weights_casts_and_types_become_f32(self):
        import numpy as np
        from onnx import TensorProto, numpy_helper
        weight = TensorProto(name="w", data_type=TensorProto.FLOAT16, dims=[2],
                             raw_data=bytes([0x00, 0x3C, 0x00, 0xC1]))  # 1.0, -2.5
        g = graph([node("Cast", ["w"], "y", to=TensorProto.FLOAT16)], outputs=[named("y")],
                  initializers=[weight])
        prepare.widen_fp16(g)
        self.assertEqual(g.initializer[0].data_type, TensorProto.FLOAT)
        self.assertEqual(list(numpy_helper.to_array(g.initializer[0])), [1.0, -2.5])
        self.assertEqual(numpy_helper.to_array(g.initializer[0]).dtype, np.float32)
        self.assertEqual(g.node[0].attribute[0].i, TensorProto.FLOAT)


class Quantize(unittest.TestCase):
    def test_a_convolution_only_an_activation_reads_gets_its_range(self):
        import numpy as np
        import quantize
        from onnx import helper, numpy_helper
        from onnxruntime.quantization.calibrate import TensorData
        nodes = [node("Conv", ["x", "w"], "relu_in"), node("Relu", ["relu_in"], "a"),
                 node("Conv", ["a", "w"], "clip_in"), node("Clip", ["clip_in", "lo", "hi"], "b"),
                 node("Conv", ["b", "w"], "shared"), node("Relu", ["shared"], "c"),
                 node("Add", ["shared", "c"], "d"),
                 node("Conv", ["d", "w"], "added"), node("Add", ["added", "d"], "e"),
                 helper.make_node("Constant", [], ["hi"], value=numpy_helper.from_array(
                     np.array(6, np.float32)))]
        g = graph(nodes, initializers=[floats("w", [1, 1, 1, 1]),
                                       numpy_helper.from_array(np.array(0, np.float32), "lo")])
        ranges = {name: TensorData(lowest=np.float32(-4), highest=np.float32(9))
                  for name in ["relu_in", "clip_in", "shared", "added"]}
        limited = {name: [float(v) for v in r.range_value]
                   for name, r in quantize.activation_ranges(g, ranges).items()}
        self.assertEqual(limited, {"relu_in": [0, 9], "clip_in": [0, 6],
                                   "shared": [-4, 9], "added": [-4, 9]})

    def test_modnets_calibration_photos_keep_its_aspect_at_its_short_side(self):
        import quantize
        modnet, isnet = quantize.recipe("modnet"), quantize.recipe("isnet")
        self.assertEqual(quantize.calibration_size(modnet, 512, 512), (384, 384))
        self.assertEqual(quantize.calibration_size(modnet, 640, 480), (512, 384))
        self.assertEqual(quantize.calibration_size(modnet, 300, 451), (384, 576))
        self.assertEqual(quantize.calibration_size(isnet, 640, 480), (1024, 1024))


if __name__ == "__main__":
    exe = prepare.venv_python(prepare.default_cache())
    if Path(sys.executable) != exe:
        os.execv(exe, [exe, __file__, *sys.argv[1:]])
    unittest.main()
