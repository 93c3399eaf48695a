//! An int8 convolution between f32 tensors, in one operator. A model
//! quantised with ONNX Runtime's QOperator format, convolutions alone,
//! reaches tract as `QuantizeLinear → Conv(u8 × i8) → DequantizeLinear`
//! around each convolution, f32 everywhere else (tract's declutter makes a
//! 1 × 1 one a quantised `EinSum`, run here as the convolution it was).
//! tract plans each as about twelve operators: its im2col, the sums for the
//! zero points, the requantisation to u8 and back (scale, add, min, max,
//! cast), most on one core, and its int8 matrix product on the kernel it
//! picks where it finds one 512-bit multiplier, the narrow 8 × 8, which ran
//! at a third to a sixth of the 16 × 16's speed on the Xeon measured. That
//! plan ran IS-Net at 1024² in 9.3 s against 1.8 s for f32 (cutout's
//! BENCHMARKS.md, "int8 on tract").
//!
//! `QConv` takes the f32 input (the inputs of a Concat made only for it,
//! joined on the channel axis), quantises it once into a plane with the
//! pad's zero points around it, packs column panels of its im2col straight
//! into the int8 kernel's layout on every core, runs the product on the
//! fastest int8 kernel this CPU has (timed once, `kernel`), and writes f32:
//! the accumulators times the input's and the channel's weight scale, a
//! ReLU after it taken in. The output is not rounded to the u8 of the
//! convolution's output scale and back: that rounding is the next
//! convolution's own quantisation's, or lost, for what reads it in f32.

use super::{lone_relu, read_once};
use rayon::prelude::*;
use std::sync::{Arc, OnceLock};
use tract_core::internal::*;
use tract_core::ops::array::TypedConcat;
use tract_core::ops::cnn::{Conv, KernelFormat, PaddingSpec, PoolSpec};
use tract_core::ops::einsum::EinSum;
use tract_core::ops::element_wise::ElementWiseOp;
use tract_core::ops::nn::DataFormat;
use tract_core::ops::quant::{DequantizeLinearF32, QuantizeLinearU8};
use tract_linalg::mmm::{AsInputValue, EagerPackedInput, FusedSpec, MMMInputValue};
use tract_linalg::mmm::{MatMatMul, PackedExoticFact};
use tract_linalg::multithread::{current_tract_executor, Executor};
use tract_linalg::pack::{PackedFormat, PackedI8K4};
use tract_linalg::BinOp;

/// Puts a `QConv` in place of each quantised convolution, with the
/// quantisation of its input and the dequantisation of its output; returns
/// how many. All or none: a convolution may read another's u8 output, and
/// a model with one this cannot plan keeps tract's plan for all.
pub(super) fn plan_qconvs(model: &mut TypedModel) -> TractResult<usize> {
    let convs: Vec<usize> = model
        .eval_order()?
        .into_iter()
        .filter(|&id| quantised(&model.nodes[id]))
        .collect();
    let mut planned = HashMap::new();
    for &id in &convs {
        match QConv::new(model, &model.nodes[id])? {
            Some(qconv) => planned.insert(id, qconv),
            None => {
                log::info!(
                    "tract: {} stays tract's int8 convolution, and so do the others",
                    model.nodes[id].name
                );
                return Ok(0);
            }
        };
    }
    // Each convolution's f32 output, in the order they run, so that one
    // reading another's output finds it made.
    let mut outputs: HashMap<usize, OutletId> = HashMap::new();
    for &id in &convs {
        let node = model.nodes[id].clone();
        let mut qconv = planned.remove(&id).unwrap();
        let sources = f32_sources(model, &node, &outputs)?;
        let name = format!("{}.qconv", node.name);
        let mut output = model.wire_node(&name, qconv.clone(), &sources)?[0];
        // Every reader of the u8 output is a dequantisation (rerouted to
        // the f32 output) or another quantised convolution (which reads
        // `outputs`): `QConv::new` checked.
        let dequantised: Vec<OutletId> = model
            .outlet_successors(OutletId::new(id, 0))
            .iter()
            .filter(|inlet| model.nodes[inlet.node].op_is::<DequantizeLinearF32>())
            .map(|inlet| OutletId::new(inlet.node, 0))
            .collect();
        for &from in &dequantised {
            reroute(model, from, output)?;
        }
        if let Some(relu) = lone_relu(model, output)? {
            qconv.relu = true;
            model.nodes[output.node].op = Box::new(qconv);
            reroute(model, relu, output)?;
            output = OutletId::new(output.node, 0);
        }
        outputs.insert(id, output);
    }
    // The convolutions, quantisations and dequantisations left unread.
    model.compact()?;
    Ok(convs.len())
}

/// Whether `node` is a quantised convolution, or a quantised product that
/// may be one: tract's declutter makes a 1 × 1 convolution an `EinSum`.
fn quantised(node: &TypedNode) -> bool {
    node.op_as::<Conv>()
        .is_some_and(|conv| conv.q_params.is_some())
        || node
            .op_as::<EinSum>()
            .is_some_and(|einsum| einsum.q_params.is_some())
}

/// The geometry of `node`, a quantised convolution that `QConv` runs: a
/// `Conv`'s own, or a 1 × 1 one's where tract made it an `EinSum` of the
/// input `[1, C, H, W]` and the weights `[O, C]` into `[1, O, H, W]`: either
/// without its batch axis of 1 where tract dropped it between two such, the
/// weights `[C]` where O is 1.
fn pool_spec(model: &TypedModel, node: &TypedNode) -> TractResult<Option<PoolSpec>> {
    if let Some(conv) = node.op_as::<Conv>() {
        let spec = &conv.pool_spec;
        let runs = conv.group == 1
            && spec.data_format == DataFormat::NCHW
            && conv.kernel_fmt == KernelFormat::OIHW
            && spec.kernel_shape.len() == 2
            && conv.q_params == Some(u8::datum_type());
        return Ok(runs.then(|| spec.clone()));
    }
    let Some(einsum) = node.op_as::<EinSum>() else {
        return Ok(None);
    };
    let (Some(input), Some(weight_shape), Some(output)) = (
        image_shape(model, node.inputs[0])?,
        model.outlet_fact(node.inputs[1])?.shape.as_concrete(),
        image_shape(model, OutletId::new(node.id, 0))?,
    ) else {
        return Ok(None);
    };
    // Where each operand's channel axis is: after the batch axis, if any.
    let (c_in, c_out) = (
        model.outlet_fact(node.inputs[0])?.rank() - 3,
        model.node_output_facts(node.id)?[0].rank() - 3,
    );
    let axes = &einsum.axes;
    let to = |from: (InOut, usize), to: InOut| axes.track_axis(from, to).ok().flatten();
    let outputs_tracked = match weight_shape.len() {
        2 => to((InOut::In(1), 0), InOut::Out(0)) == Some(c_out),
        _ => output[1] == 1,
    };
    let one_by_one = einsum.q_params == Some(u8::datum_type())
        && (1..=2).contains(&weight_shape.len())
        && [1, 2]
            .iter()
            .all(|&k| to((InOut::In(0), c_in + k), InOut::Out(0)) == Some(c_out + k))
        && to((InOut::In(0), c_in), InOut::In(1)) == Some(weight_shape.len() - 1)
        && to((InOut::In(0), c_in), InOut::Out(0)).is_none()
        && outputs_tracked
        && input[2..] == output[2..];
    Ok(one_by_one.then(|| PoolSpec {
        data_format: DataFormat::NCHW,
        kernel_shape: tvec!(1, 1),
        padding: PaddingSpec::Valid,
        dilations: None,
        strides: None,
        input_channels: input[1],
        output_channels: output[1],
    }))
}

/// `outlet`'s shape as `[1, C, H, W]`, where it is that or `[C, H, W]`.
fn image_shape(model: &TypedModel, outlet: OutletId) -> TractResult<Option<[usize; 4]>> {
    let Some(shape) = model.outlet_fact(outlet)?.shape.as_concrete() else {
        return Ok(None);
    };
    Ok(match *shape {
        [1, c, h, w] | [c, h, w] => Some([1, c, h, w]),
        _ => None,
    })
}

/// Where the convolution `node` reads its input in f32: what the
/// quantisation before it reads, or another convolution's f32 output.
fn f32_sources(
    model: &TypedModel,
    node: &TypedNode,
    outputs: &HashMap<usize, OutletId>,
) -> TractResult<TVec<OutletId>> {
    let producer = model.node(node.inputs[0].node);
    match outputs.get(&producer.id) {
        Some(&output) => Ok(tvec!(output)),
        None => unjoined(model, producer.inputs[0]),
    }
}

/// `outlet`, or the inputs of the Concat on channels that makes it where
/// it is made for one reader alone: joined as the input is quantised.
fn unjoined(model: &TypedModel, outlet: OutletId) -> TractResult<TVec<OutletId>> {
    let joined = model.node(outlet.node);
    match joined.op_as::<TypedConcat>() {
        Some(concat) if concat.axis == 1 && read_once(model, outlet)? => {
            Ok(joined.inputs.iter().copied().collect())
        }
        _ => Ok(tvec!(outlet)),
    }
}

/// Makes every reader of `from`, and the model's outputs, read `to`.
fn reroute(model: &mut TypedModel, from: OutletId, to: OutletId) -> TractResult<()> {
    for inlet in model.outlet_successors(from).to_vec() {
        model.add_edge(to, inlet)?;
    }
    for output in model.outputs.iter_mut().filter(|o| **o == from) {
        *output = to;
    }
    Ok(())
}

/// A quantised convolution's geometry, over the inputs joined on channels.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Geometry {
    /// Each input's shape, `[1, channels, height, width]`.
    inputs: Vec<[usize; 4]>,
    kernel: [usize; 2],
    strides: [usize; 2],
    dilations: [usize; 2],
    /// Zeros above and left of each plane; its padded height and width.
    before: [usize; 2],
    padded: [usize; 2],
    /// The output's height and width.
    out: [usize; 2],
}

impl Geometry {
    fn channels(&self) -> usize {
        self.inputs.iter().map(|input| input[1]).sum()
    }

    fn k(&self) -> usize {
        self.channels() * self.kernel[0] * self.kernel[1]
    }

    fn n(&self) -> usize {
        self.out[0] * self.out[1]
    }

    fn padded_plane(&self) -> usize {
        self.padded[0] * self.padded[1]
    }

    /// Where each im2col row (channel, kernel row, kernel column) reads in
    /// the padded planes, from a window's corner.
    fn rows(&self) -> Vec<usize> {
        let mut rows = Vec::with_capacity(self.k());
        for channel in 0..self.channels() {
            for y in 0..self.kernel[0] {
                for x in 0..self.kernel[1] {
                    rows.push(
                        channel * self.padded_plane()
                            + y * self.dilations[0] * self.padded[1]
                            + x * self.dilations[1],
                    );
                }
            }
        }
        rows
    }
}

/// An int8 convolution from f32 to f32 (the module's comment).
#[derive(Debug, Clone)]
pub struct QConv {
    geometry: Arc<Geometry>,
    /// The input's quantisation: `round(x / scale) + zero_point`, in u8.
    input_scale: f32,
    input_zero: i32,
    /// Output channels.
    m: usize,
    kernel: Box<dyn MatMatMul>,
    packing: usize,
    weights: Arc<Box<dyn MMMInputValue>>,
    /// Per output channel: what the i8 product lacks of the u8 one with its
    /// zero point (`(128 - zero_point) × Σ weights`), plus the bias.
    offsets: Arc<Tensor>,
    /// Per output channel: the input's scale times the weights'.
    scales: Arc<Vec<f32>>,
    /// `Geometry::rows`, worked out once.
    rows: Arc<Vec<usize>>,
    relu: bool,
    /// The node's: `[1, m, height, width]`, or without the batch axis where
    /// tract dropped it between 1 × 1 convolutions it made products.
    output_shape: TVec<usize>,
}

impl QConv {
    /// The `QConv` of `node`, a quantised convolution, where its weights,
    /// scales and zero points are constants, its weights symmetric, its
    /// input quantised from f32 (or another such convolution's output),
    /// its output read only by dequantisations and such convolutions, and
    /// this CPU has an int8 kernel.
    fn new(model: &TypedModel, node: &TypedNode) -> TractResult<Option<QConv>> {
        let Some(spec) = pool_spec(model, node)? else {
            return Ok(None);
        };
        if node.inputs.len() != 9 {
            return Ok(None);
        }
        let consts: Option<Vec<Arc<Tensor>>> = node.inputs[1..]
            .iter()
            .map(|input| model.outlet_fact(*input).ok()?.konst.clone())
            .collect();
        let Some([weights, bias, input_zero, input_scale, weight_zero, weight_scale, ..]) =
            consts.as_deref()
        else {
            return Ok(None);
        };
        let producer = model.node(node.inputs[0].node);
        let quantised_f32 = producer
            .op_as::<ElementWiseOp>()
            .is_some_and(|op| op.0.is::<QuantizeLinearU8>())
            && model.outlet_fact(producer.inputs[0])?.datum_type == f32::datum_type();
        let from_qconv = quantised(producer);
        let readers_ok = model
            .outlet_successors(OutletId::new(node.id, 0))
            .iter()
            .all(|inlet| {
                let reader = model.node(inlet.node);
                reader.op_is::<DequantizeLinearF32>() || (inlet.slot == 0 && quantised(reader))
            });
        let symmetric = values::<i32>(weight_zero)?.iter().all(|&zero| zero == 0);
        if !(quantised_f32 || from_qconv)
            || !readers_ok
            || !symmetric
            || model.output_outlets()?.contains(&OutletId::new(node.id, 0))
            || weights.datum_type() != i8::datum_type()
            || input_zero.len() != 1
            || input_scale.len() != 1
        {
            return Ok(None);
        }
        let shape_of = |outlet| image_shape(model, outlet);
        let Some(input) = shape_of(node.inputs[0])? else {
            return Ok(None);
        };
        let pair = |values: &[usize]| [values[0], values[1]];
        let (kernel, strides, dilations) = (
            pair(&spec.kernel_shape),
            pair(&spec.strides()),
            pair(&spec.dilations()),
        );
        let padding = spec
            .padding
            .compute(&input[2..], &kernel, &dilations, &strides);
        let before = [padding[0].pad_before, padding[1].pad_before];
        let padded =
            [0, 1].map(|axis| input[2 + axis] + padding[axis].pad_before + padding[axis].pad_after);
        let out = [padding[0].convoluted, padding[1].convoluted];
        // The inputs as `f32_sources` will find them: their shapes join
        // into the convolution's input.
        let sources = if quantised_f32 {
            unjoined(model, producer.inputs[0])?
        } else {
            tvec!(node.inputs[0])
        };
        let shapes = sources.iter().map(|&source| shape_of(source));
        let Some(inputs) = shapes
            .collect::<TractResult<Vec<_>>>()?
            .into_iter()
            .collect::<Option<Vec<_>>>()
        else {
            return Ok(None);
        };
        let geometry = Geometry {
            inputs,
            kernel,
            strides,
            dilations,
            before,
            padded,
            out,
        };
        let m = spec.output_channels;
        let k = geometry.k();
        if geometry.channels() != input[1]
            || weights.len() != m * k
            || out.contains(&0)
            || !(bias.len() == m || bias.len() == 1)
            || !(weight_scale.len() == m || weight_scale.len() == 1)
        {
            return Ok(None);
        }
        let Some((kernel_ker, packing)) = kernel::best() else {
            return Ok(None);
        };
        let weights = weights.clone().into_tensor().into_shape(&[m, k])?;
        let packed = kernel_ker.packings()[packing]
            .0
            .prepare_one(&weights, 1, 0)?;
        let input_zero = input_zero.cast_to_scalar::<i32>()?;
        let input_scale = input_scale.cast_to_scalar::<f32>()?;
        let bias = values::<i32>(bias)?;
        let weight_scale = values::<f32>(weight_scale)?;
        let weights = values::<i8>(&weights)?;
        let offsets: Vec<i32> = (0..m)
            .map(|row| {
                let sum: i32 = weights[row * k..][..k].iter().map(|&w| w as i32).sum();
                (128 - input_zero) * sum + bias[row % bias.len()]
            })
            .collect();
        let scales = (0..m)
            .map(|row| input_scale * weight_scale[row % weight_scale.len()])
            .collect();
        Ok(Some(QConv {
            rows: Arc::new(geometry.rows()),
            geometry: Arc::new(geometry),
            input_scale,
            input_zero,
            m,
            kernel: kernel_ker,
            packing,
            weights: Arc::new(packed),
            offsets: Arc::new(tensor1(&offsets)),
            scales: Arc::new(scales),
            relu: false,
            output_shape: match model.outlet_fact(OutletId::new(node.id, 0))?.rank() {
                4 => tvec![1, m, out[0], out[1]],
                _ => tvec![m, out[0], out[1]],
            },
        }))
    }

    /// The inputs quantised to i8 (u8 less 128), each plane with the pad's
    /// zero points around it.
    fn quantised(&self, inputs: &[TValue]) -> TractResult<Vec<i8>> {
        let g = &*self.geometry;
        let plane = g.padded_plane();
        let zero = (self.input_zero - 128) as i8;
        // Zeroed pages are mapped lazily: each plane's task writes its own.
        let mut planes = vec![0i8; g.channels() * plane];
        let plains = inputs
            .iter()
            .map(|input| input.try_as_plain_ram())
            .collect::<TractResult<Vec<_>>>()?;
        let mut values: Vec<&[f32]> = Vec::with_capacity(g.channels());
        for (plain, shape) in plains.iter().zip(&g.inputs) {
            values.extend(plain.as_slice::<f32>()?.chunks_exact(shape[2] * shape[3]));
        }
        let width = g.inputs[0][3];
        let [top, left] = g.before;
        let inverse = 1.0 / self.input_scale;
        let zero_point = self.input_zero as f32;
        on_tracts_threads(|| {
            planes
                .par_chunks_mut(plane)
                .zip(values.par_iter())
                .for_each(|(out, values)| {
                    let (above, rest) = out.split_at_mut(top * g.padded[1]);
                    above.fill(zero);
                    let mut rows = rest.chunks_exact_mut(g.padded[1]);
                    // The input's rows first: `zip` then takes no pad row.
                    for (values, out) in values.chunks_exact(width).zip(&mut rows) {
                        let (before, rest) = out.split_at_mut(left);
                        let (inside, after) = rest.split_at_mut(width);
                        before.fill(zero);
                        after.fill(zero);
                        for (out, &value) in inside.iter_mut().zip(values) {
                            *out = quantise(value * inverse + zero_point);
                        }
                    }
                    rows.for_each(|row| row.fill(zero));
                })
        });
        Ok(planes)
    }
}

/// `value` rounded to the nearest u8 (half to even, as ONNX Runtime's),
/// less 128. Adding 2²³ to a value in 0..=255 leaves its rounding in the
/// low byte of the sum's bits: no rounding call, so the loop vectorises.
fn quantise(value: f32) -> i8 {
    let bits = (value.clamp(0.0, 255.0) + 8_388_608.0).to_bits();
    ((bits as u8) ^ 0x80) as i8
}

/// `tensor`'s values as `T`s.
fn values<T: Datum + Copy>(tensor: &Tensor) -> TractResult<Vec<T>> {
    let cast = tensor.cast_to::<T>()?;
    Ok(cast.try_as_plain_ram()?.as_slice::<T>()?.to_vec())
}

/// Runs `work` on tract's thread pool, where it has one.
fn on_tracts_threads<R: Send>(work: impl FnOnce() -> R + Send) -> R {
    match current_tract_executor() {
        Executor::MultiThread(pool) => pool.install(work),
        _ => work(),
    }
}

/// How the int8 kernel reads the packed im2col: `r` columns a panel, and
/// within it each row's `r` values side by side (`PackedFormat`) or each
/// column's four rows side by side, four rows at a time (`PackedI8K4`).
#[derive(Debug, Clone, Copy)]
struct Layout {
    r: usize,
    k4: bool,
    panel_bytes: usize,
    alignment: usize,
}

impl Layout {
    fn of(kernel: &dyn MatMatMul, packing: usize, k: usize) -> Option<Layout> {
        Layout::read(kernel, packing, k).filter(|layout| layout.r <= MAX_R)
    }

    fn read(kernel: &dyn MatMatMul, packing: usize, k: usize) -> Option<Layout> {
        let format = &kernel.packings()[packing].1;
        if let Some(format) = format.downcast_ref::<PackedI8K4>() {
            return Some(Layout {
                r: format.r,
                k4: true,
                panel_bytes: format.single_panel_len(k),
                alignment: format.alignment(),
            });
        }
        let format = format.downcast_ref::<PackedFormat>()?;
        (format.dt == i8::datum_type()).then(|| Layout {
            r: format.r,
            k4: false,
            panel_bytes: format.single_panel_len(k),
            alignment: format.alignment(),
        })
    }

    /// Where row `row`'s value of column `column` goes in a panel.
    fn at(&self, row: usize, column: usize) -> usize {
        if self.k4 {
            (row / 4) * self.r * 4 + column * 4 + row % 4
        } else {
            row * self.r + column
        }
    }
}

/// About this many bytes of im2col are packed, then multiplied, at a time:
/// the panels stay in L2 while every row of weights reads them.
const CHUNK_BYTES: usize = 1 << 20;

impl QConv {
    fn run(&self, inputs: &[TValue]) -> TractResult<Tensor> {
        let g = &*self.geometry;
        let (k, n) = (g.k(), g.n());
        let layout = Layout::of(&*self.kernel, self.packing, k).context("an int8 layout")?;
        let planes = self.quantised(inputs)?;
        // SAFETY: i32s, any bits valid; the product stores every one of them.
        let mut output = unsafe { Tensor::uninitialized::<i32>(&[self.m, n])? };
        let panels_per_chunk = (CHUNK_BYTES / layout.panel_bytes).max(1);
        let panels = n.div_ceil(layout.r);
        let format = self.kernel.packings()[self.packing].1.clone();
        // SAFETY: the kernel's own scratch, used with that kernel alone.
        let mut scratch = unsafe { self.kernel.allocate_scratch_space() };
        for first in (0..panels).step_by(panels_per_chunk) {
            let count = panels_per_chunk.min(panels - first);
            let columns = (count * layout.r).min(n - first * layout.r);
            // SAFETY: bytes, any bits valid; `pack` writes each panel whole.
            let mut packed = unsafe {
                Blob::new_for_size_and_align(count * layout.panel_bytes, layout.alignment)
            };
            on_tracts_threads(|| {
                packed
                    .as_bytes_mut()
                    .par_chunks_mut(layout.panel_bytes)
                    .enumerate()
                    .for_each(|(panel, bytes)| {
                        self.pack(&planes, layout, (first + panel) * layout.r, bytes)
                    })
            });
            let b = EagerPackedInput {
                fact: PackedExoticFact {
                    format: format.clone(),
                    mn: columns.to_dim(),
                    k,
                },
                packed: Arc::new(packed),
                panel_bytes: layout.panel_bytes,
                mn: columns,
            };
            let view = TensorView::offsetting(&output, &[0, first * layout.r])?;
            let offsets = self.offsets.view();
            // SAFETY: `view` is the output's columns from the chunk's first,
            // `columns` wide and `m` high, i32 as the kernel stores; the
            // weights and panels are packed as `packing` reads them.
            unsafe {
                let store = self.kernel.c_view(Some(0), Some(1)).wrap(&view);
                self.kernel.run_with_scratch_space(
                    self.m,
                    columns,
                    &mut *scratch,
                    &[
                        FusedSpec::AddMatMul {
                            a: AsInputValue::Borrowed(&**self.weights),
                            b: AsInputValue::Borrowed(&b),
                            packing: self.packing,
                        },
                        FusedSpec::BinPerRow(offsets, BinOp::Add),
                        FusedSpec::Store(store),
                    ],
                )?;
            }
        }
        // The sums to f32, in place: the scales are per row.
        let relu = self.relu;
        let mut plain = output.try_as_plain_ram_mut()?;
        let sums = plain.as_slice_mut::<i32>()?;
        on_tracts_threads(|| {
            sums.par_chunks_mut(n)
                .zip(self.scales.par_iter())
                .for_each(|(row, &scale)| {
                    for value in row {
                        let mut f = *value as f32 * scale;
                        if relu {
                            f = f.max(0.0);
                        }
                        *value = f.to_bits() as i32;
                    }
                })
        });
        // SAFETY: every value was written above as the bits of an f32.
        unsafe { output.set_datum_type(f32::datum_type()) };
        output.into_shape(&self.output_shape)
    }

    /// Packs the im2col columns from `first` into one panel.
    fn pack(&self, planes: &[i8], layout: Layout, first: usize, panel: &mut [u8]) {
        let rows = &self.rows[..];
        let g = &*self.geometry;
        let count = layout.r.min(g.n() - first);
        // Each column's window corner in the padded plane.
        let mut corners = [0usize; MAX_R];
        for (column, corner) in corners.iter_mut().enumerate().take(count) {
            let at = first + column;
            let [y, x] = [at / g.out[1], at % g.out[1]];
            *corner = y * g.strides[0] * g.padded[1] + x * g.strides[1];
        }
        let corners = &corners[..count];
        let planes: &[u8] = bytemuck_i8(planes);
        // A stride-1 panel inside one output row reads a run of `r` bytes
        // for each row: the common case, copied whole.
        let run = count == layout.r && corners[count - 1] == corners[0] + count - 1;
        match (run, layout.k4, layout.r) {
            (true, true, 16) => runs_k4::<16>(planes, rows, corners[0], panel),
            (true, true, 8) => runs_k4::<8>(planes, rows, corners[0], panel),
            (true, false, r) => {
                for (&row, out) in rows.iter().zip(panel.chunks_exact_mut(r)) {
                    out.copy_from_slice(&planes[row + corners[0]..][..r]);
                }
                panel[rows.len() * r..].fill(0);
            }
            _ => {
                panel.fill(0);
                for (index, &row) in rows.iter().enumerate() {
                    for (column, &corner) in corners.iter().enumerate() {
                        panel[layout.at(index, column)] = planes[row + corner];
                    }
                }
            }
        }
    }
}

/// The most columns a kernel's panel holds (16 on x86-64 and ARM).
const MAX_R: usize = 64;

/// `R` columns from `corner` on for each row, four rows of a column side
/// by side (`PackedI8K4`); the rows past the last are zeros.
fn runs_k4<const R: usize>(planes: &[u8], rows: &[usize], corner: usize, panel: &mut [u8]) {
    let zeros = [0u8; R];
    for (four, out) in rows.chunks(4).zip(panel.chunks_exact_mut(4 * R)) {
        let run = |i: usize| -> &[u8; R] {
            four.get(i).map_or(&zeros, |&row| {
                planes[row + corner..][..R].try_into().unwrap()
            })
        };
        interleave(run(0), run(1), run(2), run(3), out);
    }
}

/// `out` is each column's four values side by side: a transpose.
fn interleave<const R: usize>(a: &[u8; R], b: &[u8; R], c: &[u8; R], d: &[u8; R], out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if R == 16 {
        use std::arch::x86_64::*;
        assert!(out.len() >= 64);
        // SAFETY: SSE2 is part of x86-64; 16 bytes are read from each run
        // (R == 16) and 64 written to `out`, checked above.
        unsafe {
            let [a, b, c, d] = [a, b, c, d].map(|run| _mm_loadu_si128(run.as_ptr().cast()));
            let (ab, cd) = (_mm_unpacklo_epi8(a, b), _mm_unpacklo_epi8(c, d));
            let (ab_high, cd_high) = (_mm_unpackhi_epi8(a, b), _mm_unpackhi_epi8(c, d));
            let quarters = [
                _mm_unpacklo_epi16(ab, cd),
                _mm_unpackhi_epi16(ab, cd),
                _mm_unpacklo_epi16(ab_high, cd_high),
                _mm_unpackhi_epi16(ab_high, cd_high),
            ];
            for (i, quarter) in quarters.into_iter().enumerate() {
                _mm_storeu_si128(out.as_mut_ptr().add(16 * i).cast(), quarter);
            }
        }
        return;
    }
    for (column, out) in out.chunks_exact_mut(4).enumerate().take(R) {
        out.copy_from_slice(&[a[column], b[column], c[column], d[column]]);
    }
}

/// i8s as the u8s of the same bits, which the kernel's packing takes.
fn bytemuck_i8(values: &[i8]) -> &[u8] {
    // SAFETY: i8 and u8 have the same size, alignment and any bits valid.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast(), values.len()) }
}

impl Op for QConv {
    fn name(&self) -> StaticName {
        "QConv".into()
    }

    op_as_typed_op!();
}

impl PartialEq for QConv {
    fn eq(&self, other: &QConv) -> bool {
        self.geometry == other.geometry
            && self.input_scale == other.input_scale
            && self.input_zero == other.input_zero
            && self.kernel.name() == other.kernel.name()
            && self.packing == other.packing
            && self.weights == other.weights
            && self.offsets == other.offsets
            && self.scales == other.scales
            && self.relu == other.relu
            && self.output_shape == other.output_shape
    }
}

impl Eq for QConv {}

impl EvalOp for QConv {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        ensure!(
            inputs.len() == self.geometry.inputs.len()
                && inputs
                    .iter()
                    .zip(&self.geometry.inputs)
                    .all(|(input, shape)| {
                        // With its batch axis, or without where tract dropped it.
                        (input.shape() == shape || input.shape() == &shape[1..])
                            && input.datum_type() == f32::datum_type()
                    }),
            "planned for f32 inputs of {:?}",
            self.geometry.inputs
        );
        Ok(tvec!(self.run(&inputs)?.into_tvalue()))
    }
}

impl TypedOp for QConv {
    fn output_facts(&self, _inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        Ok(tvec!(f32::fact(&*self.output_shape)))
    }

    as_op!();
}

/// The int8 kernel and packing of this CPU's that ran a convolution-sized
/// product fastest, once a process.
mod kernel {
    use super::*;

    pub(super) fn best() -> Option<(Box<dyn MatMatMul>, usize)> {
        static BEST: OnceLock<Option<(Box<dyn MatMatMul>, usize)>> = OnceLock::new();
        BEST.get_or_init(|| {
            let mut best: Option<(std::time::Duration, Box<dyn MatMatMul>, usize)> = None;
            for (kernel, packing) in candidates() {
                let Ok(time) = time(&*kernel, packing) else {
                    continue;
                };
                log::debug!("tract int8: {} in {time:?}", kernel.name());
                if best.as_ref().is_none_or(|(fastest, ..)| time < *fastest) {
                    best = Some((time, kernel, packing));
                }
            }
            let (_, kernel, packing) = best?;
            log::info!("tract int8: kernel {}", kernel.name());
            Some((kernel, packing))
        })
        .clone()
    }

    /// The CPU's own instruction set, not tract's edited one: cutout has
    /// tract leave AVX-512 out on Zen 4 for its f32 kernels
    /// (`prefer_avx2_on_zen4`); the int8 kernel is chosen by its own time.
    fn hardware() -> tract_linalg::isa::IsaSet {
        #[cfg(target_arch = "x86_64")]
        return tract_linalg::x86_64::isa_set();
        #[cfg(target_arch = "aarch64")]
        return tract_linalg::arm64::isa_set();
        #[allow(unreachable_code)]
        tract_linalg::isa::native()
    }

    /// Each i32 kernel this build has and the CPU runs, with its i8 × i8
    /// packing, whose im2col layout `Layout` writes.
    pub(super) fn candidates() -> Vec<(Box<dyn MatMatMul>, usize)> {
        tract_linalg::mmm_routines::runnable_for(&hardware())
            .into_iter()
            .filter(|kernel| kernel.built() && kernel.internal_type() == i32::datum_type())
            .filter(|kernel| kernel.nr() > 1)
            .filter_map(|kernel| {
                let packing = (0..kernel.packings().len()).find(|&packing| {
                    let a = &kernel.packings()[packing].0;
                    let a_i8 = a.downcast_ref::<PackedI8K4>().is_some()
                        || a.downcast_ref::<PackedFormat>()
                            .is_some_and(|a| a.dt == i8::datum_type());
                    a_i8 && Layout::of(&*kernel, packing, 4).is_some()
                })?;
                Some((kernel, packing))
            })
            .collect()
    }

    /// The best of three runs of a product the size of a small
    /// convolution's, on one core.
    fn time(kernel: &dyn MatMatMul, packing: usize) -> TractResult<std::time::Duration> {
        let (m, k, n) = (64, 576, 1024);
        let a = Tensor::zero::<i8>(&[m, k])?;
        let b = Tensor::zero::<i8>(&[k, n])?;
        let (pack_a, pack_b) = &kernel.packings()[packing];
        let (a, b) = (pack_a.prepare_one(&a, 1, 0)?, pack_b.prepare_one(&b, 0, 1)?);
        let mut c = Tensor::zero::<i32>(&[m, n])?;
        let mut best = std::time::Duration::MAX;
        for _ in 0..3 {
            let start = std::time::Instant::now();
            // SAFETY: `c` is the `m` × `n` i32s the product stores, `a` and
            // `b` packed by the kernel's own packing.
            unsafe {
                let store = kernel.c_view(Some(0), Some(1)).wrap(&c.view_mut());
                let mut scratch = kernel.allocate_scratch_space();
                tract_linalg::multithread::multithread_tract_scope(Executor::SingleThread, || {
                    kernel.run_with_scratch_space(
                        m,
                        n,
                        &mut *scratch,
                        &[
                            FusedSpec::AddMatMul {
                                a: AsInputValue::Borrowed(&*a),
                                b: AsInputValue::Borrowed(&*b),
                                packing,
                            },
                            FusedSpec::Store(store),
                        ],
                    )
                })?;
            }
            best = best.min(start.elapsed());
        }
        Ok(best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tract_and_planned;
    use tract_core::ops::math::max;
    use tract_core::ops::quant::quantize_linear_u8;

    /// A convolution's geometry: input, outputs, kernel, padding, strides,
    /// dilations.
    type Case = ([usize; 4], usize, [usize; 2], usize, [usize; 2], [usize; 2]);

    const INPUT_SCALE: f32 = 0.05;
    /// Not 128, the i8 0: a pad packed as 0 instead of the zero point shows.
    const INPUT_ZERO: i32 = 100;
    const OUTPUT_SCALE: f32 = 0.5;

    /// `x` (f32, or the u8 of another quantised convolution) through a
    /// quantised convolution of made-up weights, in u8: its scale and zero
    /// point are `INPUT_SCALE` and `INPUT_ZERO` (from f32), its output's
    /// `OUTPUT_SCALE` and 128.
    fn wire_qconv(model: &mut TypedModel, x: OutletId, case: Case) -> OutletId {
        let (_, outputs, kernel, padding, strides, dilations) = case;
        let fact = model.outlet_fact(x).unwrap().clone();
        let inputs = fact.shape.as_concrete().unwrap()[1];
        let name = format!("conv{}", model.nodes.len());
        // Another's u8 is read at its output's scale.
        let (x, input_scale, input_zero) = if fact.datum_type == f32::datum_type() {
            let quantise = quantize_linear_u8(1.0 / INPUT_SCALE, INPUT_ZERO as u8);
            let x = model
                .wire_node(format!("{name}.q"), quantise, &[x])
                .unwrap()[0];
            (x, INPUT_SCALE, INPUT_ZERO)
        } else {
            (x, OUTPUT_SCALE, 128)
        };
        let weights: Vec<i8> = (0..outputs * inputs * kernel[0] * kernel[1])
            .map(|i| ((i * 37) % 255) as i8)
            .collect();
        let weights =
            Tensor::from_shape(&[outputs, inputs, kernel[0], kernel[1]], &weights).unwrap();
        let bias: Vec<i32> = (0..outputs as i32).map(|o| o * 100 - 700).collect();
        let weight_scales: Vec<f32> = (0..outputs).map(|o| 0.001 + o as f32 * 0.0001).collect();
        let mut constant =
            |what: &str, value: Tensor| model.add_const(format!("{name}.{what}"), value).unwrap();
        let params = [
            constant("weights", weights),
            constant("bias", tensor1(&bias)),
            constant("x0", tensor0(input_zero)),
            constant("x_scale", tensor0(input_scale)),
            constant("k0", tensor1(&vec![0i32; outputs])),
            constant("k_scale", tensor1(&weight_scales)),
            constant("y0", tensor0(128i32)),
            constant("y_scale", tensor0(OUTPUT_SCALE)),
        ];
        let conv = Conv {
            q_params: Some(u8::datum_type()),
            ..crate::conv_op(inputs, outputs, kernel, padding, strides, dilations, 1)
        };
        let mut wires = vec![x];
        wires.extend(params);
        model.wire_node(name, conv, &wires).unwrap()[0]
    }

    fn dequantised(model: &mut TypedModel, x: OutletId) -> OutletId {
        let dequantise = DequantizeLinearF32 {
            scale: OUTPUT_SCALE,
            zero_point: 128,
        };
        let name = format!("dq{}", model.nodes.len());
        model.wire_node(name, dequantise, &[x]).unwrap()[0]
    }

    fn qconv_model(case: Case) -> TypedModel {
        let mut model = TypedModel::default();
        let x = model.add_source("x", f32::fact(case.0)).unwrap();
        let conv = wire_qconv(&mut model, x, case);
        let out = dequantised(&mut model, conv);
        model.select_output_outlets(&[out]).unwrap();
        model
    }

    /// The largest difference between `tract`'s values and `planned`'s, in
    /// output steps. tract rounds each output to its u8; `QConv` does not,
    /// so they may be half a step apart.
    fn steps_apart(tract: &Tensor, planned: &Tensor) -> f32 {
        assert_eq!(tract.shape(), planned.shape());
        let tract = tract.to_plain_array_view::<f32>().unwrap();
        let planned = planned.to_plain_array_view::<f32>().unwrap();
        let apart = tract.iter().zip(&planned).map(|(a, b)| (a - b).abs());
        apart.fold(0.0, f32::max) / OUTPUT_SCALE
    }

    /// Like `steps_apart`, the mean: for a chain, where a step apart in the
    /// first's output moves the next's sums.
    fn mean_steps_apart(tract: &Tensor, planned: &Tensor) -> f32 {
        let tract = tract.to_plain_array_view::<f32>().unwrap();
        let planned = planned.to_plain_array_view::<f32>().unwrap();
        let apart = tract.iter().zip(&planned).map(|(a, b)| (a - b).abs());
        apart.sum::<f32>() / tract.len() as f32 / OUTPUT_SCALE
    }

    const CASES: [Case; 7] = [
        // 3 × 3 over 77 columns: panels across rows, a last one part full.
        ([1, 3, 7, 11], 5, [3, 3], 1, [1, 1], [1, 1]),
        // Rows of 40: panels inside a row, copied as runs.
        ([1, 2, 6, 40], 3, [3, 3], 1, [1, 1], [1, 1]),
        // More output channels than a kernel's rows, and k a multiple of 4.
        ([1, 4, 12, 36], 40, [3, 3], 1, [1, 1], [1, 1]),
        // Stride 2 (IS-Net's first convolution: three channels to 64).
        ([1, 3, 9, 70], 64, [3, 3], 1, [2, 2], [1, 1]),
        // Dilations (IS-Net's RSU-4F), reaching past the plane.
        ([1, 2, 10, 34], 16, [3, 3], 4, [1, 1], [4, 4]),
        // 1 × 1 over 3 channels: k under one group of four.
        ([1, 3, 5, 33], 8, [1, 1], 0, [1, 1], [1, 1]),
        ([1, 5, 8, 8], 7, [5, 5], 2, [1, 1], [1, 1]),
    ];

    #[test]
    fn a_qconv_gives_tracts_int8_convolution_within_its_rounding() {
        for case in CASES {
            let (tract, planned, replaced) =
                tract_and_planned(qconv_model(case), case.0, plan_qconvs);
            assert_eq!(replaced, 1, "{case:?}");
            let apart = steps_apart(&tract, &planned);
            assert!(apart <= 0.5001, "{case:?}: {apart} steps apart");
        }
    }

    /// A `QConv` of `model`'s one quantised convolution, and its input.
    fn qconv_of(model: &TypedModel) -> QConv {
        let node = model
            .nodes
            .iter()
            .find(|node| node.op_is::<Conv>())
            .unwrap();
        QConv::new(model, node).unwrap().unwrap()
    }

    #[test]
    fn every_int8_kernel_of_this_cpu_gives_the_same_sums() {
        let candidates = kernel::candidates();
        assert!(!candidates.is_empty());
        let names: Vec<_> = candidates.iter().map(|(kernel, _)| kernel.name()).collect();
        eprintln!("int8 kernels: {names:?}");
        for case in CASES {
            let mut qconv = qconv_of(&qconv_model(case));
            let values: Vec<f32> = (0..case.0.iter().product::<usize>())
                .map(|i| ((i * 7919) % 251) as f32 / 25.0 - 5.0)
                .collect();
            let input = tvec!(Tensor::from_shape(&case.0, &values).unwrap().into_tvalue());
            let best = qconv.run(&input).unwrap();
            for (kernel, packing) in kernel::candidates() {
                let weights = &qconv_model_weights(case);
                let packed = kernel.packings()[packing]
                    .0
                    .prepare_one(weights, 1, 0)
                    .unwrap();
                let name = kernel.name().to_string();
                (qconv.kernel, qconv.packing, qconv.weights) = (kernel, packing, Arc::new(packed));
                let output = qconv.run(&input).unwrap();
                crate::assert_same_bits(&best, &output, &format!("{case:?} on {name}"));
            }
        }
    }

    /// The weights `wire_qconv` makes, as the product's `[m, k]`.
    fn qconv_model_weights(case: Case) -> Tensor {
        let model = qconv_model(case);
        let node = model
            .nodes
            .iter()
            .find(|node| node.op_is::<Conv>())
            .unwrap();
        let weights = model
            .outlet_fact(node.inputs[1])
            .unwrap()
            .konst
            .clone()
            .unwrap();
        let [m, c, h, w] = <[usize; 4]>::try_from(weights.shape()).unwrap();
        weights.into_tensor().into_shape(&[m, c * h * w]).unwrap()
    }

    #[test]
    fn a_qconv_takes_in_the_concat_before_it_and_the_relu_after_it() {
        let mut model = TypedModel::default();
        let a = model.add_source("a", f32::fact([1, 2, 6, 20])).unwrap();
        let zero = tensor0(0f32).broadcast_into_rank(4).unwrap();
        let zero = model.add_const("zero", zero).unwrap();
        // The second part of the input, made from the first.
        let b = model.wire_node("b", max(), &[a, zero]).unwrap()[0];
        let joined = model
            .wire_node("joined", TypedConcat::new(1), &[a, b])
            .unwrap()[0];
        let case = ([1, 4, 6, 20], 24, [3, 3], 1, [1, 1], [1, 1]);
        let conv = wire_qconv(&mut model, joined, case);
        let out = dequantised(&mut model, conv);
        let zero = tensor0(0f32).broadcast_into_rank(4).unwrap();
        let zero = model.add_const("zero.relu", zero).unwrap();
        let relu = model.wire_node("relu", max(), &[out, zero]).unwrap()[0];
        model.select_output_outlets(&[relu]).unwrap();
        let (tract, planned, replaced) = tract_and_planned(model.clone(), [1, 2, 6, 20], |model| {
            let replaced = plan_qconvs(model)?;
            let ops: Vec<_> = model.nodes.iter().map(|node| node.op.name()).collect();
            assert!(!ops.contains(&"Concat".into()), "{ops:?}");
            assert_eq!(ops.iter().filter(|&op| op == "Max").count(), 1, "{ops:?}");
            Ok(replaced)
        });
        assert_eq!(replaced, 1);
        assert!(steps_apart(&tract, &planned) <= 0.5001);
        let planned = planned.to_plain_array_view::<f32>().unwrap();
        assert!(planned.iter().all(|&value| value >= 0.0));
    }

    #[test]
    fn a_convolution_reading_anothers_u8_reads_its_f32_requantised() {
        let mut model = TypedModel::default();
        let x = model.add_source("x", f32::fact([1, 3, 8, 24])).unwrap();
        let first = wire_qconv(&mut model, x, ([1, 3, 8, 24], 8, [3, 3], 1, [1, 1], [1, 1]));
        // Its u8 read by the second as its input: the same scale.
        let second = wire_qconv(
            &mut model,
            first,
            ([1, 8, 8, 24], 4, [3, 3], 1, [1, 1], [1, 1]),
        );
        let out = dequantised(&mut model, second);
        model.select_output_outlets(&[out]).unwrap();
        let (tract, planned, replaced) = tract_and_planned(model, [1, 3, 8, 24], plan_qconvs);
        assert_eq!(replaced, 2);
        // The first's outputs are rounded as tract rounds them, but their
        // f32 may fall either side of a half: then a step apart, times a
        // weight, in the second's sums.
        let mean = mean_steps_apart(&tract, &planned);
        assert!(mean <= 0.3, "{mean} steps apart on average");
    }

    #[test]
    fn one_by_one_convolutions_tract_made_products_are_planned_too() {
        // Three in a chain, the last to one channel (MODNet's 1 × 1s).
        let mut model = TypedModel::default();
        let x = model.add_source("x", f32::fact([1, 16, 5, 9])).unwrap();
        let mut wire = x;
        for (inputs, outputs) in [(16, 24), (24, 8), (8, 1)] {
            let case = ([1, inputs, 5, 9], outputs, [1, 1], 0, [1, 1], [1, 1]);
            wire = wire_qconv(&mut model, wire, case);
        }
        let out = dequantised(&mut model, wire);
        model.select_output_outlets(&[out]).unwrap();
        let model = model.into_decluttered().unwrap();
        let einsums: Vec<_> = model
            .nodes
            .iter()
            .filter_map(|node| node.op_as::<EinSum>())
            .map(|einsum| einsum.axes.to_string())
            .collect();
        // With the batch axis dropped between them, the last one's weights `[C]`.
        assert_eq!(
            einsums,
            [
                "NIHW,OI,O,,,O,O,,->OHW",
                "IHW,OI,O,,,O,O,,->OHW",
                "IHW,I,O,,,O,O,,->NOHW"
            ]
        );
        let (tract, planned, replaced) = tract_and_planned(model, [1, 16, 5, 9], plan_qconvs);
        assert_eq!(replaced, 3, "{einsums:?}");
        let mean = mean_steps_apart(&tract, &planned);
        assert!(mean <= 0.3, "{mean} steps apart on average ({einsums:?})");
    }

    #[test]
    fn a_model_with_an_int8_convolution_qconv_cannot_plan_keeps_tracts_for_all() {
        let mut model = qconv_model(([1, 3, 7, 11], 5, [3, 3], 1, [1, 1], [1, 1]));
        // Weights with zero points other than 0 are not planned.
        let k0 = model.node_id_by_name("conv1.k0").unwrap();
        let odd = tensor1(&[0i32, 1, 0, 0, 0]);
        model.nodes[k0].op =
            Box::new(tract_core::ops::konst::Const::new(odd.clone().into_arc_tensor()).unwrap());
        model.nodes[k0].outputs[0].fact = TypedFact::try_from(odd).unwrap();
        assert_eq!(plan_qconvs(&mut model).unwrap(), 0);
        assert!(model.nodes.iter().any(|node| node.op_is::<Conv>()));
    }

    #[test]
    fn quantise_rounds_half_to_even_and_saturates() {
        for (value, byte) in [
            (-3.0, 0),
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (254.5, 254),
            (300.0, 255),
        ] {
            assert_eq!(quantise(value), (byte - 128) as i8, "{value}");
        }
    }
}
