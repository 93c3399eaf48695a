//! tract's lazy im2col, packed a run of neighbouring values at a time. A
//! convolution run as a matrix product reads its input through im2col
//! panels packed on the fly: for each of `k` (channel, kernel row, kernel
//! column) the `r` values of the panel's output columns. tract gathers
//! them one value at a time even where, as in most panels of a stride-1
//! convolution, they lie side by side in the input row; `PlannedIm2col`
//! copies such a run whole. Same values in the same places, so the matrix
//! product's sums are tract's to the bit; tract's packing was 17% of a
//! U2NetP run's cycles (BENCHMARKS.md, "tract's im2col").

use super::put_in_place;
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::sync::Arc;
use tract_linalg::mmm::{EagerPackedInput, MMMInputFormat, MMMInputValue, PackedMatrixStorage};
use tract_linalg::pack::PackedFormat;
use tract_linalg::WeightType;
use tract_onnx::tract_core::internal::*;
use tract_onnx::tract_core::ops::cnn::Conv;
use tract_onnx::tract_core::ops::matmul::pack::DynPackedExoticFact;
use tract_onnx::tract_core::ops::nn::DataFormat;

/// A convolution's kernel, strides and dilations over height and width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Window {
    kernel: [usize; 2],
    strides: [usize; 2],
    dilations: [usize; 2],
}

/// Each ungrouped 2D NCHW convolution's window, by node name, read before
/// tract's optimisation turns them into im2col and matrix products.
pub(super) fn conv_windows(model: &TypedModel) -> HashMap<String, Window> {
    let mut windows = HashMap::new();
    for node in &model.nodes {
        let Some(conv) = node.op_as::<Conv>() else {
            continue;
        };
        let spec = &conv.pool_spec;
        if conv.group != 1 || spec.data_format != DataFormat::NCHW || spec.kernel_shape.len() != 2 {
            continue;
        }
        let pair = |values: &[usize]| [values[0], values[1]];
        windows.insert(
            node.name.clone(),
            Window {
                kernel: pair(&spec.kernel_shape),
                strides: pair(&spec.strides()),
                dilations: pair(&spec.dilations()),
            },
        );
    }
    windows
}

/// Puts a `PlannedIm2col` in place of tract's im2col of each convolution
/// in `windows` whose input shape is known; returns how many.
pub(super) fn plan_im2cols(
    model: &mut TypedModel,
    windows: &HashMap<String, Window>,
) -> TractResult<usize> {
    put_in_place(model, |model, node| planned_im2col(model, node, windows))
}

fn planned_im2col(
    model: &TypedModel,
    node: &TypedNode,
    windows: &HashMap<String, Window>,
) -> TractResult<Option<PlannedIm2col>> {
    // tract's op type is private: it is known by its name and its node's,
    // `<conv>.lazyIm2col`, and checked against the shapes below.
    let Some(window) = node
        .name
        .strip_suffix(".lazyIm2col")
        .and_then(|conv| windows.get(conv))
    else {
        return Ok(None);
    };
    if node.op.name() != "LazyIm2col" {
        return Ok(None);
    }
    let input = model.outlet_fact(node.inputs[0])?;
    let output = model.outlet_fact(OutletId::new(node.id, 0))?;
    let packed = output
        .exotic_fact()
        .and_then(|fact| fact.downcast_ref::<DynPackedExoticFact>());
    let (Some(shape), Some(packed)) = (input.shape.as_concrete(), packed) else {
        return Ok(None);
    };
    let (Ok(k), Ok(mn)) = (packed.k.to_usize(), packed.mn.to_usize()) else {
        return Ok(None);
    };
    let Some(packer) = packed
        .packers
        .first()
        .and_then(|packer| packer.downcast_ref::<PackedFormat>())
    else {
        return Ok(None);
    };
    let Ok([1, channels, height, width]) = <[usize; 4]>::try_from(shape) else {
        return Ok(None);
    };
    if input.datum_type != f32::datum_type()
        || packer.dt != f32::datum_type()
        || output.shape.as_concrete() != Some(&[1, 1])
    {
        return Ok(None);
    }
    let Some(im2col) = Im2col::new(*window, [channels, height, width], packer.clone()) else {
        return Ok(None);
    };
    if (im2col.rows.len(), im2col.columns.len()) != (k, mn) {
        return Ok(None);
    }
    Ok(Some(PlannedIm2col {
        input: shape.to_vec(),
        im2col: Arc::new(im2col),
    }))
}

/// Where, in the input's values, each of the matrix product's `k` rows and
/// `mn` columns starts; the value of (row, column) is at the sum.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
struct Im2col {
    packer: PackedFormat,
    rows: Vec<usize>,
    columns: Vec<usize>,
    /// The output's fact as tract declares it for its own im2col, held
    /// here because a packed input lends it out by reference.
    fact: DynPackedExoticFact,
}

impl Im2col {
    /// The valid convolution of a `[channels, height, width]` input, in
    /// tract's order: rows by channel, then kernel row, then kernel column;
    /// columns by output row, then output column. None where the window
    /// does not fit the input.
    fn new(
        window: Window,
        [channels, height, width]: [usize; 3],
        packer: PackedFormat,
    ) -> Option<Im2col> {
        let Window {
            kernel,
            strides,
            dilations,
        } = window;
        let out = |axis: usize, size: usize| {
            let reach = kernel[axis].checked_sub(1)? * dilations[axis];
            let span = size.checked_sub(reach)?;
            (span > 0 && strides[axis] > 0).then(|| (span - 1) / strides[axis] + 1)
        };
        let (out_height, out_width) = (out(0, height)?, out(1, width)?);
        let mut rows = Vec::with_capacity(channels * kernel[0] * kernel[1]);
        for channel in 0..channels {
            for y in 0..kernel[0] {
                for x in 0..kernel[1] {
                    rows.push((channel * height + y * dilations[0]) * width + x * dilations[1]);
                }
            }
        }
        let mut columns = Vec::with_capacity(out_height * out_width);
        for y in 0..out_height {
            for x in 0..out_width {
                columns.push(y * strides[0] * width + x * strides[1]);
            }
        }
        let fact = DynPackedExoticFact {
            k: rows.len().to_dim(),
            mn: columns.len().to_dim(),
            packers: vec![Box::new(packer.clone())],
        };
        Some(Im2col {
            packer,
            rows,
            columns,
            fact,
        })
    }
}

// Not a `PackedFormat`: tract then walks the product column panel by
// column panel, so each panel is packed once, not once per row panel.
impl MMMInputFormat for Im2col {
    fn prepare_tensor(&self, _: &Tensor, _: usize, _: usize) -> TractResult<Tensor> {
        bail!("an im2col input is packed a panel at a time")
    }

    fn prepare_one_view(
        &self,
        _: &TensorView,
        _: usize,
        _: usize,
    ) -> TractResult<Box<dyn MMMInputValue>> {
        bail!("an im2col input is packed a panel at a time")
    }

    fn precursor(&self) -> WeightType {
        self.packer.precursor()
    }

    fn r(&self) -> usize {
        self.packer.r
    }

    fn k_alignment(&self) -> usize {
        1
    }

    fn mem_size(&self, k: TDim, mn: TDim) -> TDim {
        k * mn * size_of::<f32>()
    }

    fn extract_at_mn_f16(&self, _: &EagerPackedInput, _: usize, _: &mut [f16]) -> TractResult<()> {
        bail!("an im2col input is packed a panel at a time")
    }

    fn extract_at_mn_f32(&self, _: &EagerPackedInput, _: usize, _: &mut [f32]) -> TractResult<()> {
        bail!("an im2col input is packed a panel at a time")
    }
}

impl std::fmt::Display for Im2col {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PlannedIm2col (k={}, mn={})",
            self.rows.len(),
            self.columns.len()
        )
    }
}

/// tract's `LazyIm2col` of an ungrouped convolution, packing with
/// `PackedInput`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedIm2col {
    input: Vec<usize>,
    im2col: Arc<Im2col>,
}

impl Op for PlannedIm2col {
    fn name(&self) -> StaticName {
        "PlannedIm2col".into()
    }

    op_as_typed_op!();
}

impl EvalOp for PlannedIm2col {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let input = args_1!(inputs);
        anyhow::ensure!(
            input.shape() == self.input && input.datum_type() == f32::datum_type(),
            "planned for an f32 input of {:?}",
            self.input
        );
        let packed = PackedInput {
            input,
            im2col: self.im2col.clone(),
        };
        let storage = PackedMatrixStorage::new_batched(&[1, 1], tvec!(Box::new(packed) as _));
        Ok(tvec!(storage.into_tensor(f32::datum_type()).into_tvalue()))
    }
}

impl TypedOp for PlannedIm2col {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        Ok(tvec!(inputs[0]
            .datum_type
            .fact([1, 1])
            .with_exotic_fact(self.im2col.fact.clone())))
    }

    as_op!();
}

/// One convolution input, packed a panel at a time as the matrix product
/// asks: for each row, the `r` columns' values side by side.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PackedInput {
    input: TValue,
    im2col: Arc<Im2col>,
}

impl std::hash::Hash for PackedInput {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.input.as_bytes(), &self.im2col).hash(state);
    }
}

impl std::fmt::Display for PackedInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PlannedIm2col input of {:?}", self.input.shape())
    }
}

impl PackedInput {
    /// Writes panel `index` into `panel` (`r` values for each row).
    fn pack(&self, index: usize, panel: &mut [MaybeUninit<f32>]) -> TractResult<()> {
        let Im2col {
            packer,
            rows,
            columns,
            ..
        } = &*self.im2col;
        let r = packer.r;
        let columns = &columns[index * r..columns.len().min((index + 1) * r)];
        let plain = self.input.try_as_plain_ram()?;
        let input = plain.as_slice::<f32>()?;
        let side_by_side =
            columns.len() == r && columns.windows(2).all(|pair| pair[1] == pair[0] + 1);
        if side_by_side {
            match r {
                // The kernels' widths (x86-64 and ARM): a copy of a known
                // length is a few moves, of any other a call to memcpy.
                4 => copy_runs::<4>(input, rows, columns[0], panel),
                6 => copy_runs::<6>(input, rows, columns[0], panel),
                8 => copy_runs::<8>(input, rows, columns[0], panel),
                12 => copy_runs::<12>(input, rows, columns[0], panel),
                16 => copy_runs::<16>(input, rows, columns[0], panel),
                _ => gather(input, rows, columns, r, panel),
            }
        } else {
            gather(input, rows, columns, r, panel);
        }
        Ok(())
    }
}

/// For each row, the `R` values from `row + column` into the next `R` of `panel`.
fn copy_runs<const R: usize>(
    input: &[f32],
    rows: &[usize],
    column: usize,
    panel: &mut [MaybeUninit<f32>],
) {
    for (&row, out) in rows.iter().zip(panel.chunks_exact_mut(R)) {
        let run: &[f32; R] = input[row + column..][..R].try_into().unwrap();
        let out: &mut [MaybeUninit<f32>; R] = out.try_into().unwrap();
        *out = run.map(MaybeUninit::new);
    }
}

/// For each row, the value at `row + column` for each of `columns`, into
/// the next `r` of `panel`; a last panel's missing columns are zeros (they
/// are computed, and never read).
fn gather(
    input: &[f32],
    rows: &[usize],
    columns: &[usize],
    r: usize,
    panel: &mut [MaybeUninit<f32>],
) {
    for (&row, out) in rows.iter().zip(panel.chunks_exact_mut(r)) {
        let (present, missing) = out.split_at_mut(columns.len());
        for (out, &column) in present.iter_mut().zip(columns) {
            out.write(input[row + column]);
        }
        missing.fill(MaybeUninit::new(0.0));
    }
}

impl MMMInputValue for PackedInput {
    fn format(&self) -> &dyn MMMInputFormat {
        &*self.im2col
    }

    fn scratch_panel_buffer_layout(&self) -> Option<std::alloc::Layout> {
        Some(
            self.im2col
                .packer
                .single_panel_layout(self.k(), size_of::<f32>()),
        )
    }

    fn panel_bytes(&self, index: usize, buffer: Option<*mut u8>) -> TractResult<*const u8> {
        let buffer = buffer.context("no panel buffer")?;
        let length = self.im2col.packer.single_panel_len(self.k());
        // SAFETY: tract hands each panel a buffer of
        // `scratch_panel_buffer_layout` (`length` f32s, aligned for the
        // kernel, uninitialised) that nothing else uses until the next panel.
        let panel =
            unsafe { std::slice::from_raw_parts_mut(buffer as *mut MaybeUninit<f32>, length) };
        self.pack(index, panel)?;
        Ok(buffer)
    }

    fn k(&self) -> usize {
        self.im2col.rows.len()
    }

    fn mn(&self) -> usize {
        self.im2col.columns.len()
    }

    fn exotic_fact(&self) -> &dyn ExoticFact {
        &self.im2col.fact
    }

    fn extract_at_mn_f16(&self, _: usize, _: &mut [f16]) -> TractResult<()> {
        bail!("an im2col input is packed a panel at a time")
    }

    fn extract_at_mn_f32(&self, _: usize, _: &mut [f32]) -> TractResult<()> {
        bail!("an im2col input is packed a panel at a time")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::tract::{assert_same_bits, conv_model, tract_and_planned};
    use tract_onnx::tract_core::knobs::KnobScope;

    /// A convolution's model (`conv_model`) on an `input`, as tract's
    /// optimiser plans it and with the planned im2col.
    fn both(model: TypedModel, input: [usize; 4]) -> (Tensor, Tensor, usize) {
        let windows = conv_windows(&model);
        // As the engine plans: every convolution as im2col and a product.
        let optimised = KnobScope::new([("TRACT_DISABLE_DIRECT_SPATIAL", "true")])
            .unwrap()
            .enter(|| model.into_optimized())
            .unwrap();
        tract_and_planned(optimised, input, |model| plan_im2cols(model, &windows))
    }

    #[test]
    fn a_planned_im2col_gives_tracts_values_to_the_bit() {
        let cases = [
            // 77 columns: panels that cross a row, and a last one part full.
            ([1, 3, 7, 11], 5, [3, 3], 1, [1, 1], [1, 1]),
            // More output channels than one of the kernel's row panels.
            ([1, 4, 12, 12], 40, [3, 3], 1, [1, 1], [1, 1]),
            ([1, 4, 9, 9], 8, [3, 3], 2, [1, 1], [2, 2]),
            ([1, 2, 10, 9], 16, [3, 3], 1, [2, 2], [1, 1]),
            ([1, 3, 8, 13], 7, [5, 3], 0, [1, 2], [1, 1]),
            ([1, 1, 5, 5], 1, [5, 5], 0, [1, 1], [1, 1]),
        ];
        for (input, outputs, kernel, padding, strides, dilations) in cases {
            let label =
                format!("{input:?} {outputs} {kernel:?} {padding} {strides:?} {dilations:?}");
            let (tract, planned, replaced) = both(
                conv_model(input, outputs, kernel, padding, strides, dilations, 1),
                input,
            );
            assert_eq!(replaced, 1, "{label}");
            assert_same_bits(&tract, &planned, &label);
        }
    }

    #[test]
    fn a_grouped_convolution_is_left_to_tract() {
        let input = [1, 4, 6, 6];
        let grouped = conv_model(input, 4, [3, 3], 1, [1, 1], [1, 1], 2);
        let (tract, planned, replaced) = both(grouped, input);
        assert_eq!((replaced, &tract), (0, &planned));
    }
}
