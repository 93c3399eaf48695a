//! tract's lazy im2col, packed a run of neighbouring values at a time, with
//! the convolution's zero padding packed in. A convolution run as a matrix
//! product reads its input through im2col panels packed on the fly: for
//! each of `k` (channel, kernel row, kernel column) the `r` values of the
//! panel's output columns. tract gathers them one value at a time even
//! where, as in most panels of a stride-1 convolution, they lie side by
//! side in the input row; `PlannedIm2col` copies such a run whole (tract's
//! packing was 17% of a U2NetP run's cycles, BENCHMARKS.md, "tract's
//! im2col"). tract also pads each convolution's input into a fresh tensor
//! first; where that pad is the im2col's alone, `PlannedIm2col` reads the
//! pad's input instead and writes the zeros itself (IS-Net's 116 pads took
//! 10% of a run, BENCHMARKS.md, "Pads packed in"). Same values in the
//! same places, so the matrix product's sums are tract's to the bit. Each
//! thread keeps the panels it packed last (`RecentPanels`): tract asks for
//! the same panel again and again where a convolution's weights do not fit
//! in L2.

use super::pad::PlannedPad;
use super::{patch_each, read_once};
use std::alloc::Layout;
use std::cell::RefCell;
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tract_core::internal::*;
use tract_core::ops::cnn::Conv;
use tract_core::ops::matmul::pack::DynPackedExoticFact;
use tract_core::ops::nn::DataFormat;
use tract_linalg::mmm::{EagerPackedInput, MMMInputFormat, MMMInputValue, PackedMatrixStorage};
use tract_linalg::pack::PackedFormat;
use tract_linalg::WeightType;

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
/// in `windows` whose input shape is known, reading the input of the
/// `PlannedPad` before it where that pad is the im2col's alone; returns how
/// many.
pub(super) fn plan_im2cols(
    model: &mut TypedModel,
    windows: &HashMap<String, Window>,
) -> TractResult<usize> {
    patch_each(model, |model, node| {
        let Some((im2col, inputs)) = planned_im2col(model, node, windows)? else {
            return Ok(None);
        };
        let mut patch = TypedModelPatch::replace_single_op(model, node, &inputs, im2col)?;
        if *inputs != node.inputs {
            patch.obliterate(node.inputs[0].node)?;
        }
        Ok(Some(patch))
    })
}

/// The planned im2col of `node` and the outlets it reads.
fn planned_im2col(
    model: &TypedModel,
    node: &TypedNode,
    windows: &HashMap<String, Window>,
) -> TractResult<Option<(PlannedIm2col, Vec<OutletId>)>> {
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
    let padded = model.node(node.inputs[0].node);
    let alone = read_once(model, node.inputs[0])?;
    let (inputs, padding, read) = match padded.op_as::<PlannedPad>() {
        Some(pad) if alone => (
            pad.inputs.clone(),
            [pad.rows, pad.columns],
            padded.inputs.clone(),
        ),
        _ => (
            vec![[1, channels, height, width]],
            [(0, 0); 2],
            node.inputs.clone(),
        ),
    };
    let Some(im2col) = Im2col::new(*window, &inputs, padding, packer.clone()) else {
        return Ok(None);
    };
    if (im2col.k(), im2col.mn()) != (k, mn) {
        return Ok(None);
    }
    let im2col = PlannedIm2col {
        inputs,
        im2col: Arc::new(im2col),
    };
    Ok(Some((im2col, read)))
}

/// Where the matrix product's `k` rows and `mn` columns read their values:
/// row (channel, kernel tap), column (output row, output column), in
/// tract's order.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
struct Im2col {
    packer: PackedFormat,
    /// Each input's channels.
    channels: Vec<usize>,
    /// The inputs' planes' height and width.
    size: [usize; 2],
    /// Each kernel tap's place in the window, in rows and columns, by
    /// kernel row then kernel column.
    taps: Vec<[usize; 2]>,
    strides: [usize; 2],
    /// Zeros above and left of each plane.
    padding: [usize; 2],
    /// The output's rows and columns.
    out: [usize; 2],
    /// The output's fact as tract declares it for its own im2col, held
    /// here because a packed input lends it out by reference.
    fact: DynPackedExoticFact,
}

/// The most columns a kernel packs side by side (16 on x86-64 and ARM).
const MAX_R: usize = 64;

impl Im2col {
    /// The convolution of `[1, channels, height, width]` inputs joined on
    /// the channel axis, with zeros (`padding`) around each plane: top and
    /// bottom, left and right. None where the window does not fit the
    /// padded input.
    fn new(
        window: Window,
        inputs: &[[usize; 4]],
        padding: [(usize, usize); 2],
        packer: PackedFormat,
    ) -> Option<Im2col> {
        let Window {
            kernel,
            strides,
            dilations,
        } = window;
        let [_, _, height, width] = *inputs.first()?;
        let size = [height, width];
        let reach = [0, 1].map(|axis| kernel[axis].saturating_sub(1) * dilations[axis]);
        let out = |axis: usize| {
            let padded = size[axis] + padding[axis].0 + padding[axis].1;
            let span = padded.checked_sub(reach[axis])?;
            (kernel[axis] > 0 && span > 0 && strides[axis] > 0)
                .then(|| (span - 1) / strides[axis] + 1)
        };
        let out = [out(0)?, out(1)?];
        if packer.r > MAX_R {
            return None;
        }
        let mut taps = Vec::with_capacity(kernel[0] * kernel[1]);
        for y in 0..kernel[0] {
            for x in 0..kernel[1] {
                taps.push([y * dilations[0], x * dilations[1]]);
            }
        }
        let channels: Vec<usize> = inputs.iter().map(|input| input[1]).collect();
        let fact = DynPackedExoticFact {
            k: (channels.iter().sum::<usize>() * taps.len()).to_dim(),
            mn: (out[0] * out[1]).to_dim(),
            packers: vec![Box::new(packer.clone())],
        };
        Some(Im2col {
            packer,
            channels,
            size,
            taps,
            strides,
            padding: [padding[0].0, padding[1].0],
            out,
            fact,
        })
    }

    fn k(&self) -> usize {
        self.channels.iter().sum::<usize>() * self.taps.len()
    }

    fn mn(&self) -> usize {
        self.out[0] * self.out[1]
    }

    /// The top left corner of column `column`'s window in the planes:
    /// above or left of them where it reaches into the padding.
    fn corner(&self, column: usize) -> [isize; 2] {
        let at = [column / self.out[1], column % self.out[1]];
        [0, 1].map(|axis| (at[axis] * self.strides[axis]) as isize - self.padding[axis] as isize)
    }

    /// Whether a window at `corner`, and `more` columns right of it, lies
    /// inside the planes.
    fn inside(&self, [top, left]: [isize; 2], more: usize) -> bool {
        // The last tap is how far the window reaches.
        let [down, right] = self.taps.last().copied().unwrap_or_default();
        top >= 0
            && left >= 0
            && top as usize + down < self.size[0]
            && left as usize + right + more < self.size[1]
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
        write!(f, "PlannedIm2col (k={}, mn={})", self.k(), self.mn())
    }
}

/// tract's `LazyIm2col` of an ungrouped convolution, packing with
/// `PackedInput`; where it reads a pad's inputs instead of the pad's
/// output, it packs the pad's zeros itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedIm2col {
    inputs: Vec<[usize; 4]>,
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
        ensure!(
            inputs.len() == self.inputs.len()
                && inputs.iter().zip(&self.inputs).all(|(input, shape)| {
                    input.shape() == shape && input.datum_type() == f32::datum_type()
                }),
            "planned for f32 inputs of {:?}",
            self.inputs
        );
        let packed = PackedInput::new(inputs, self.im2col.clone());
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

/// One convolution's inputs, packed a panel at a time as the matrix
/// product asks: for each row, the `r` columns' values side by side.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PackedInput {
    /// Tells this run's panels from every other's in `RECENT`.
    id: u64,
    inputs: TVec<TValue>,
    im2col: Arc<Im2col>,
}

impl std::hash::Hash for PackedInput {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        for input in &self.inputs {
            input.as_bytes().hash(state);
        }
        self.im2col.hash(state);
    }
}

impl std::fmt::Display for PackedInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shapes: Vec<_> = self.inputs.iter().map(|input| input.shape()).collect();
        write!(f, "PlannedIm2col inputs of {shapes:?}")
    }
}

impl PackedInput {
    fn new(inputs: TVec<TValue>, im2col: Arc<Im2col>) -> PackedInput {
        PackedInput {
            id: NEXT_INPUT_ID.fetch_add(1, Ordering::Relaxed),
            inputs,
            im2col,
        }
    }

    /// Writes panel `index` into `panel` (`r` values for each row).
    fn pack(&self, index: usize, panel: &mut [MaybeUninit<f32>]) -> TractResult<()> {
        let im2col = &*self.im2col;
        let r = im2col.packer.r;
        let first = index * r;
        let count = im2col.mn().min(first + r) - first;
        let plains = self
            .inputs
            .iter()
            .map(|input| input.try_as_plain_ram())
            .collect::<TractResult<TVec<_>>>()?;
        let inputs = plains
            .iter()
            .map(|plain| plain.as_slice::<f32>())
            .collect::<TractResult<TVec<_>>>()?;
        let planes = Planes { im2col, inputs };
        let corner = im2col.corner(first);
        let stride = im2col.strides[1];
        let in_one_row = count == r && first % im2col.out[1] + r <= im2col.out[1];
        // The kernels' widths (x86-64 and ARM) and the common strides: a
        // copy of a known length and stride is a few moves.
        let copied = in_one_row
            && match r {
                3 => planes.runs_of::<3>(stride, corner, panel),
                4 => planes.runs_of::<4>(stride, corner, panel),
                6 => planes.runs_of::<6>(stride, corner, panel),
                8 => planes.runs_of::<8>(stride, corner, panel),
                12 => planes.runs_of::<12>(stride, corner, panel),
                16 => planes.runs_of::<16>(stride, corner, panel),
                _ => false,
            };
        if !copied {
            // Runs of the panel's columns that share an output row.
            let mut runs = [([0isize; 2], 0usize); MAX_R];
            let mut count_runs = 0;
            let mut column = first;
            while column < first + count {
                let length = (im2col.out[1] - column % im2col.out[1]).min(first + count - column);
                runs[count_runs] = (im2col.corner(column), length);
                count_runs += 1;
                column += length;
            }
            planes.gather(&runs[..count_runs], r, panel);
        }
        Ok(())
    }
}

static NEXT_INPUT_ID: AtomicU64 = AtomicU64::new(0);

/// tract's blocks are at most 16 panels a side.
const MAX_RECENT: usize = 16;

/// Room for this thread's recent panels (at least two are kept, whatever
/// their size): tract's budget for a block, a third of the core's share
/// of L2, which holds all the column panels it will ask for again.
fn recent_bytes() -> usize {
    let cache = tract_linalg::cache::cache_info();
    match cache.l2 / cache.l2_sharers_or_one() {
        0 => 256 << 10,
        l2 => (l2 / 3).clamp(64 << 10, 64 << 20),
    }
}

thread_local! {
    static RECENT: RefCell<RecentPanels> = const { RefCell::new(RecentPanels::new()) };
}

/// The panels this thread packed last, the latest first. tract runs a
/// product whose weights do not fit in L2 in blocks: a few column panels
/// against one block of weight rows, then the same column panels against
/// the next block, and asks for each panel again each time. IS-Net's
/// 512-channel convolutions were packed 16 times over (BENCHMARKS.md,
/// "Panels packed once"). Until a product asks for a panel again, one is
/// kept, in the same place, as tract's own buffer was: a ring of them cost
/// the products that never ask again about what it saved. tract only holds
/// a panel's address until it asks for the next, on the same thread, so
/// any but the latest may be reused.
struct RecentPanels {
    panels: Vec<RecentPanel>,
    /// The product asking now (its input's id), and the furthest panel it
    /// asked this thread for.
    input: u64,
    furthest: usize,
    /// How many panels to keep for it: one, until it goes back.
    room: usize,
}

struct RecentPanel {
    input: u64,
    index: usize,
    layout: Layout,
    panel: *mut u8,
}

impl RecentPanels {
    const fn new() -> RecentPanels {
        RecentPanels {
            panels: Vec::new(),
            input: u64::MAX,
            furthest: 0,
            room: 1,
        }
    }

    fn panel(&mut self, input: &PackedInput, index: usize) -> TractResult<*const u8> {
        let layout = input
            .im2col
            .packer
            .single_panel_layout(input.k(), size_of::<f32>());
        if self.input != input.id {
            (self.input, self.furthest, self.room) = (input.id, index, 1);
        }
        let panels = &mut self.panels;
        if let Some(found) = panels
            .iter()
            .position(|p| p.input == input.id && p.index == index)
        {
            panels[..=found].rotate_right(1);
            return Ok(panels[0].panel);
        }
        if index < self.furthest {
            self.room = (recent_bytes() / layout.size().max(1)).clamp(2, MAX_RECENT);
        }
        self.furthest = self.furthest.max(index);
        panels.truncate(self.room);
        let mut reused = if panels.len() == self.room {
            panels.pop()
        } else {
            None
        };
        if reused.as_ref().is_some_and(|p| p.layout != layout) {
            reused = None;
        }
        let slot = match reused {
            Some(slot) => slot,
            None => RecentPanel::new(layout)?,
        };
        panels.insert(0, slot);
        let slot = &mut panels[0];
        slot.input = input.id;
        slot.index = usize::MAX;
        // SAFETY: the slot's block is `layout.size()` bytes, aligned for
        // f32 and the kernel, ours alone; written before it is read.
        let panel = unsafe {
            std::slice::from_raw_parts_mut(
                slot.panel as *mut MaybeUninit<f32>,
                layout.size() / size_of::<f32>(),
            )
        };
        input.pack(index, panel)?;
        slot.index = index;
        Ok(slot.panel)
    }
}

impl RecentPanel {
    fn new(layout: Layout) -> TractResult<RecentPanel> {
        ensure!(layout.size() > 0, "an empty panel");
        // SAFETY: a layout of non-zero size.
        let panel = unsafe { std::alloc::alloc(layout) };
        ensure!(
            !panel.is_null(),
            "no memory for a panel of {} bytes",
            layout.size()
        );
        Ok(RecentPanel {
            input: u64::MAX,
            index: usize::MAX,
            layout,
            panel,
        })
    }
}

impl Drop for RecentPanel {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, and dropped once.
        unsafe { std::alloc::dealloc(self.panel, self.layout) };
    }
}

/// How far ahead in a row `runs` asks for the values of the panels to
/// come: four cache lines. A panel reads a row of each of its rows' planes
/// (IS-Net's and U2NetP's convolutions, hundreds of rows at once), more
/// than the hardware prefetcher follows; asking ahead made their tract runs
/// 3-7% faster on x86-64, and MODNet's no slower (BENCHMARKS.md, "Rows
/// asked for ahead").
const PREFETCH_AHEAD: usize = 64;

/// Asks for `values[at]` to be brought to the cache, where there is one.
fn prefetch(values: &[f32], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(value) = values.get(at) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch reads nothing and never faults; the address
        // is in bounds anyway.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((value as *const f32).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (values, at);
}

/// The inputs' planes, with zeros around them.
struct Planes<'a> {
    im2col: &'a Im2col,
    inputs: TVec<&'a [f32]>,
}

impl Planes<'_> {
    /// Calls `fill` with each row's plane, tap and `r` values of `panel`.
    fn each_row(
        &self,
        r: usize,
        panel: &mut [MaybeUninit<f32>],
        mut fill: impl FnMut(&[f32], [usize; 2], &mut [MaybeUninit<f32>]),
    ) {
        let [height, width] = self.im2col.size;
        let mut rows = panel.chunks_exact_mut(r);
        for (input, &channels) in self.inputs.iter().zip(&self.im2col.channels) {
            for plane in input.chunks_exact(height * width).take(channels) {
                for (&tap, out) in self.im2col.taps.iter().zip(&mut rows) {
                    fill(plane, tap, out);
                }
            }
        }
    }

    /// `runs::<R, stride>` where the stride is 1 or 2; false for any other.
    fn runs_of<const R: usize>(
        &self,
        stride: usize,
        corner: [isize; 2],
        panel: &mut [MaybeUninit<f32>],
    ) -> bool {
        match stride {
            1 => self.runs::<R, 1>(corner, panel),
            2 => self.runs::<R, 2>(corner, panel),
            _ => return false,
        }
        true
    }

    /// For each row, the `R` values from the window at `corner` rightwards,
    /// `S` apart, into the next `R` of `panel`.
    fn runs<const R: usize, const S: usize>(
        &self,
        corner: [isize; 2],
        panel: &mut [MaybeUninit<f32>],
    ) {
        let [height, width] = self.im2col.size;
        // From a run's first value to its last.
        let span = (R - 1) * S + 1;
        let run = |row: &[f32]| -> [MaybeUninit<f32>; R] {
            let row = &row[..span];
            std::array::from_fn(|i| MaybeUninit::new(row[i * S]))
        };
        if self.im2col.inside(corner, span - 1) {
            // Every run lies inside its plane.
            let base = corner[0] as usize * width + corner[1] as usize;
            return self.each_row(R, panel, |plane, [y, x], out| {
                let out: &mut [MaybeUninit<f32>; R] = out.try_into().unwrap();
                let at = base + y * width + x;
                prefetch(plane, at + PREFETCH_AHEAD);
                *out = run(&plane[at..]);
            });
        }
        let [top, left] = corner;
        self.each_row(R, panel, |plane, [y, x], out| {
            let out: &mut [MaybeUninit<f32>; R] = out.try_into().unwrap();
            // Negative coordinates wrap to values over any size.
            let y = (top + y as isize) as usize;
            let x = left + x as isize;
            if y >= height {
                *out = [MaybeUninit::new(0.0); R];
            } else if x >= 0 && x as usize + span <= width {
                *out = run(&plane[y * width + x as usize..]);
            } else {
                let row = &plane[y * width..][..width];
                *out = std::array::from_fn(|i| {
                    let x = (x + (i * S) as isize) as usize;
                    MaybeUninit::new(row.get(x).copied().unwrap_or(0.0))
                });
            }
        });
    }

    /// For each row, the values of `runs` (a window's corner, and how many
    /// windows from it rightwards, a stride apart), one run after the
    /// other into the next `r` of `panel`; a last panel's missing columns
    /// are zeros (they are computed, and never read).
    fn gather(&self, runs: &[([isize; 2], usize)], r: usize, panel: &mut [MaybeUninit<f32>]) {
        let [height, width] = self.im2col.size;
        let stride = self.im2col.strides[1];
        self.each_row(r, panel, |plane, [y, x], out| {
            let mut out = out;
            for &([top, left], length) in runs {
                let (run, rest) = out.split_at_mut(length);
                out = rest;
                // Negative coordinates wrap to values over any size.
                let y = (top + y as isize) as usize;
                let x = left + x as isize;
                if y >= height {
                    run.fill(MaybeUninit::new(0.0));
                    continue;
                }
                let row = &plane[y * width..][..width];
                let xs = (x..).step_by(stride);
                if x >= 0 && x as usize + (length - 1) * stride < width {
                    for (out, x) in run.iter_mut().zip(xs) {
                        out.write(row[x as usize]);
                    }
                } else {
                    for (out, x) in run.iter_mut().zip(xs) {
                        out.write(row.get(x as usize).copied().unwrap_or(0.0));
                    }
                }
            }
            out.fill(MaybeUninit::new(0.0));
        });
    }
}

impl MMMInputValue for PackedInput {
    fn format(&self) -> &dyn MMMInputFormat {
        &*self.im2col
    }

    /// None: panels are packed into this thread's `RECENT`, not tract's scratch.
    fn scratch_panel_buffer_layout(&self) -> Option<Layout> {
        None
    }

    /// The panel from this thread's recent ones, packed there first if it
    /// is not among them.
    fn panel_bytes(&self, index: usize, _buffer: Option<*mut u8>) -> TractResult<*const u8> {
        RECENT.with_borrow_mut(|recent| recent.panel(self, index))
    }

    fn k(&self) -> usize {
        self.im2col.k()
    }

    fn mn(&self) -> usize {
        self.im2col.mn()
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
    use crate::pad::plan_pads;
    use crate::{assert_same_bits, conv_model, tract_and_planned, wire_conv};
    use std::cell::Cell;
    use tract_core::knobs::KnobScope;
    use tract_core::ops::array::{Pad, PadMode, TypedConcat};

    /// `model` on an `input`, as tract's optimiser plans it and with the
    /// planned pads and im2cols, as the engine plans; and how many im2cols
    /// were planned and how many pads are left.
    fn both(model: TypedModel, input: [usize; 4]) -> (Tensor, Tensor, usize, usize) {
        let windows = conv_windows(&model);
        // As the engine plans: every convolution as im2col and a product.
        let optimised = KnobScope::new([("TRACT_DISABLE_DIRECT_SPATIAL", "true")])
            .unwrap()
            .enter(|| model.into_optimized())
            .unwrap();
        let pads_left = Cell::new(0);
        let (tract, planned, im2cols) = tract_and_planned(optimised, input, |model| {
            plan_pads(model)?;
            let im2cols = plan_im2cols(model, &windows)?;
            let pads = model.nodes.iter().filter(|node| node.op_is::<PlannedPad>());
            pads_left.set(pads.count());
            Ok(im2cols)
        });
        (tract, planned, im2cols, pads_left.get())
    }

    #[test]
    fn a_planned_im2col_gives_tracts_values_to_the_bit_and_packs_the_pads_zeros() {
        let cases = [
            // 77 columns: panels that cross a row, and a last one part full.
            ([1, 3, 7, 11], 5, [3, 3], 1, [1, 1], [1, 1]),
            // Rows of 40: panels inside the planes, and panels at their edges.
            ([1, 2, 6, 40], 3, [3, 3], 1, [1, 1], [1, 1]),
            // More output channels than one of the kernel's row panels.
            ([1, 4, 12, 12], 40, [3, 3], 1, [1, 1], [1, 1]),
            ([1, 4, 9, 9], 8, [3, 3], 2, [1, 1], [2, 2]),
            // Windows that reach over a whole plane and into the zeros past it.
            ([1, 2, 4, 34], 3, [3, 3], 4, [1, 1], [4, 4]),
            ([1, 2, 10, 9], 16, [3, 3], 1, [2, 2], [1, 1]),
            // Stride 2 over rows of 35 and 30 outputs: panels copied a
            // stride apart, inside the planes and at their edges (IS-Net's
            // first convolution: three channels to 64).
            ([1, 3, 9, 70], 64, [3, 3], 1, [2, 2], [1, 1]),
            ([1, 2, 8, 60], 16, [3, 3], 1, [2, 2], [1, 1]),
            ([1, 3, 8, 13], 7, [5, 3], 0, [1, 2], [1, 1]),
            ([1, 1, 5, 5], 1, [5, 5], 0, [1, 1], [1, 1]),
            // Weights of 4.5 MiB, past a third of L2 here: tract runs the
            // product in blocks and asks for each column panel again for
            // each block of weight rows (`RecentPanels`).
            ([1, 256, 6, 40], 512, [3, 3], 1, [1, 1], [1, 1]),
        ];
        for (input, outputs, kernel, padding, strides, dilations) in cases {
            let label =
                format!("{input:?} {outputs} {kernel:?} {padding} {strides:?} {dilations:?}");
            let (tract, planned, im2cols, pads_left) = both(
                conv_model(input, outputs, kernel, padding, strides, dilations, 1),
                input,
            );
            assert_eq!((im2cols, pads_left), (1, 0), "{label}");
            assert_same_bits(&tract, &planned, &label);
        }
    }

    #[test]
    fn a_panel_asked_for_again_in_a_blocked_product_is_not_packed_again() {
        let shape = [1, 2, 6, 40];
        let values: Vec<f32> = (0..480).map(|v| v as f32).collect();
        let image = Tensor::from_shape(&shape, &values).unwrap().into_tvalue();
        let window = Window {
            kernel: [3, 3],
            strides: [1, 1],
            dilations: [1, 1],
        };
        let packer = PackedFormat::new(f32::datum_type(), 12, 64);
        let im2col = Arc::new(Im2col::new(window, &[shape], [(1, 1), (1, 1)], packer).unwrap());
        let length = im2col.k() * 12;
        let panel =
            |input: &PackedInput, index: usize| input.panel_bytes(index, None).unwrap() as *mut f32;
        // SAFETY: a panel of `length` values, not asked for again meanwhile.
        let values_of =
            |panel: *mut f32| unsafe { std::slice::from_raw_parts(panel, length).to_vec() };
        const MARK: f32 = -1.5;

        // A product that only goes forward packs each panel in one place,
        // as tract's own buffer did.
        let forward = PackedInput::new(tvec![image.clone()], im2col.clone());
        let first = panel(&forward, 0);
        let packed = values_of(first);
        assert_eq!(panel(&forward, 1), first);

        // Going back, it is a product in blocks, and from then on its
        // panels are kept. Marked, a panel packed again loses the mark.
        let blocks = PackedInput::new(tvec![image], im2col.clone());
        panel(&blocks, 0);
        panel(&blocks, 1);
        let first = panel(&blocks, 0);
        assert_eq!(values_of(first), packed);
        // SAFETY: this thread's panel, which tract would only read.
        unsafe { *first = MARK };
        let second = panel(&blocks, 1);
        assert_ne!(second, first);
        let again = panel(&blocks, 0);
        assert_eq!((again, values_of(again)[0]), (first, MARK));

        // Pushed out by the 19 panels after it, it is packed again.
        for index in 1..20 {
            panel(&blocks, index);
        }
        assert_eq!(values_of(panel(&blocks, 0)), packed);

        // Another run's panel of the same index is its own.
        let doubled: Vec<f32> = values.iter().map(|v| v * 2.0).collect();
        let doubled = Tensor::from_shape(&shape, &doubled).unwrap().into_tvalue();
        let other_run = PackedInput::new(tvec![doubled], im2col);
        let twice: Vec<f32> = packed.iter().map(|v| v * 2.0).collect();
        assert_eq!(values_of(panel(&other_run, 0)), twice);
    }

    #[test]
    fn channels_joined_then_padded_are_packed_from_their_parts() {
        let input = [1, 2, 5, 30];
        let mut model = TypedModel::default();
        let x = model.add_source("x", f32::fact(input)).unwrap();
        let values: Vec<f32> = (0..3 * 5 * 30).map(|i| (i % 13) as f32 - 6.0).collect();
        let other = model
            .add_const(
                "other",
                Tensor::from_shape(&[1, 3, 5, 30], &values).unwrap(),
            )
            .unwrap();
        let joined = model
            .wire_node("join", TypedConcat { axis: 1 }, &[other, x])
            .unwrap();
        let conv = wire_conv(&mut model, joined[0], 4, [3, 3], 1, [1, 1], [1, 1], 1);
        model.select_output_outlets(&[conv]).unwrap();
        let (tract, planned, im2cols, pads_left) = both(model, input);
        assert_eq!((im2cols, pads_left), (1, 0));
        assert_same_bits(&tract, &planned, "joined");
    }

    #[test]
    fn a_pad_read_by_more_than_the_im2col_is_kept() {
        let input = [1, 2, 6, 20];
        let mut model = TypedModel::default();
        let x = model.add_source("x", f32::fact(input)).unwrap();
        let pad = Pad {
            pads: vec![(0, 0), (0, 0), (1, 2), (2, 1)],
            mode: PadMode::Constant(rctensor0(0f32)),
        };
        let padded = model.wire_node("pad", pad, &[x]).unwrap()[0];
        let conv = wire_conv(&mut model, padded, 3, [3, 3], 0, [1, 1], [1, 1], 1);
        model.select_output_outlets(&[conv, padded]).unwrap();
        let (tract, planned, im2cols, pads_left) = both(model, input);
        assert_eq!((im2cols, pads_left), (1, 1));
        assert_same_bits(&tract, &planned, "read twice");
    }

    #[test]
    fn a_grouped_convolution_is_left_to_tract() {
        let input = [1, 4, 6, 6];
        let grouped = conv_model(input, 4, [3, 3], 1, [1, 1], [1, 1], 2);
        let (tract, planned, im2cols, _) = both(grouped, input);
        assert_eq!((im2cols, &tract), (0, &planned));
    }
}
