//! cutout's plan for a model on tract (README.md). `optimise` turns a
//! decluttered model into tract's optimised plan with cutout's operators
//! in it, which give tract's values to the bit: `resize`, `pad` (which
//! also takes in the Concat before it) and `max_pool` (2 × 2 max pools of
//! stride 2) run a plane per core, and `im2col` packs a convolution's input
//! for its matrix product a run of neighbouring values at a time, writing
//! the zeros of the pad before it itself. Before tract optimises, `norm`
//! puts one operator in place of MODNet's IBNorm, whose instance norms
//! differ from tract's in the last bits. `to_f32` and `prefer_avx2_on_zen4`
//! are the other two things cutout does to tract's plan.
#![deny(unsafe_code)]

mod fuse;
// tract hands an im2col input its panel buffer as a raw pointer, and the
// packing asks for its rows ahead with a prefetch.
#[allow(unsafe_code)]
mod im2col;
mod max_pool;
mod norm;
mod pad;
// The planned operators' output is written without being zeroed first.
#[allow(unsafe_code)]
mod plane_by_plane;
// The int8 kernel reads the packed im2col and writes the sums through
// tract's raw pointers; the sums become f32 in place.
mod planned_resize;
#[allow(unsafe_code)]
mod qconv;

use tract_core::floats::FloatPrecisionTranslator;
use tract_core::internal::*;
use tract_core::knobs::KnobScope;

/// How many nodes each of cutout's passes replaced in one plan. A pass
/// that silently stops applying (after a tract update, or on a model
/// exported anew) shows here, and fails a test, before it shows as time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replaced {
    pub qconvs: usize,
    pub resizes: usize,
    pub norms: usize,
    pub fused: usize,
    pub pads: usize,
    pub im2cols: usize,
    pub max_pools: usize,
}

/// The passes, as `TRACT_PLANNED_LEAVE_OUT` names them.
pub const PASSES: [&str; 7] = [
    "qconv", "resize", "norm", "fuse", "pad", "im2col", "max_pool",
];

/// The passes named in `TRACT_PLANNED_LEAVE_OUT` (comma-separated), which
/// `optimise` then leaves out: how each pass's gain is measured
/// (bench/planned_gains.py). Unset, every pass runs.
fn left_out() -> TractResult<Vec<String>> {
    let names = std::env::var("TRACT_PLANNED_LEAVE_OUT").unwrap_or_default();
    let names: Vec<String> = names
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect();
    if let Some(unknown) = names.iter().find(|n| !PASSES.contains(&n.as_str())) {
        bail!("TRACT_PLANNED_LEAVE_OUT names {unknown:?}, not one of {PASSES:?}");
    }
    Ok(names)
}

/// `model` (decluttered, in f32) as tract optimises it, with cutout's
/// operators in place of tract's; and how many nodes each pass replaced.
pub fn optimise(mut model: TypedModel) -> TractResult<(TypedModel, Replaced)> {
    let left_out = left_out()?;
    let on = |pass: &str| !left_out.iter().any(|n| n == pass);
    let mut replaced = Replaced::default();
    if on("qconv") {
        replaced.qconvs = qconv::plan_qconvs(&mut model)?;
    }
    if on("resize") {
        replaced.resizes = planned_resize::plan_resizes(&mut model)?;
    }
    if on("norm") {
        replaced.norms = norm::plan_norms(&mut model)?;
    }
    let windows = im2col::conv_windows(&model);
    // Every convolution as im2col and a matrix product: tract's
    // direct spatial convolution for all it takes was slower on each
    // model, IS-Net's run by a quarter (BENCHMARKS.md, "tract").
    let mut optimised = KnobScope::new([("TRACT_DISABLE_DIRECT_SPATIAL", "true")])?
        .enter(|| model.into_optimized())?;
    if on("fuse") {
        replaced.fused = fuse::fuse_after_convs(&mut optimised)?;
    }
    if on("pad") {
        replaced.pads = pad::plan_pads(&mut optimised)?;
    }
    if on("im2col") {
        replaced.im2cols = im2col::plan_im2cols(&mut optimised, &windows)?;
    }
    if on("max_pool") {
        replaced.max_pools = max_pool::plan_max_pools(&mut optimised)?;
    }
    Ok((optimised, replaced))
}

/// An fp16 model in f32: tract runs f16 graphs very slowly on x86, and f32
/// is the fast path everywhere. The weights are cast here, once: tract's
/// translator makes each an f16 constant and a Cast, and its constant
/// folding keeps the Cast of any over 2 MiB (the f32 copy would pass its
/// 4 MiB budget), so IS-Net's 18 largest were cast, and packed for their
/// matrix products, on every run (BENCHMARKS.md, "Weights cast once").
pub fn to_f32(model: &mut TypedModel) -> TractResult<()> {
    use tract_core::ops::konst::Const;
    for node in &mut model.nodes {
        let Some(konst) = node.op_as::<Const>() else {
            continue;
        };
        if konst.val().datum_type() == DatumType::F16 && konst.val().is_plain() {
            let weights = konst.val().cast_to::<f32>()?.into_owned().into_arc_tensor();
            node.outputs[0].fact = TypedFact::try_from(&weights)?;
            node.op = Box::new(Const::new(weights)?);
        }
    }
    model.transform(&FloatPrecisionTranslator::new(
        DatumType::F16,
        DatumType::F32,
    ))
}

/// Zen 4 runs a 512-bit multiply-add as two 256-bit halves, so AVX-512
/// gives it no more arithmetic per cycle, and tract's AVX2 kernels ran
/// IS-Net 13% faster there than the AVX-512 ones tract picks for it
/// (BENCHMARKS.md, "tract, 2026-11-24"). tract reads its instruction set
/// once, at its first plan: this must come before. An operator's own
/// `TRACT_CPU_ISA` wins.
/// Once a process: every model's load calls it.
pub fn prefer_avx2_on_zen4() {
    use tract_linalg::knobs::TRACT_CPU_ISA;
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        if is_zen4(&cpuinfo) && std::env::var_os(TRACT_CPU_ISA.name).is_none() {
            log::info!(
                "tract: AVX2 kernels on this Zen 4 CPU ({}=-avx512f)",
                TRACT_CPU_ISA.name
            );
            TRACT_CPU_ISA.set(Some("-avx512f".into()));
        }
    });
}

/// AMD's family 25 with AVX-512, by the first CPU of `/proc/cpuinfo`.
fn is_zen4(cpuinfo: &str) -> bool {
    let first = cpuinfo.split("\n\n").next().unwrap_or_default();
    let field = |name: &str| {
        first.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == name).then(|| value.trim())
        })
    };
    field("vendor_id") == Some("AuthenticAMD")
        && field("cpu family") == Some("25")
        && field("flags").is_some_and(|flags| flags.split(' ').any(|flag| flag == "avx512f"))
}

/// Puts the operator `planned` makes for a node in that node's place, for
/// every node it makes one for; returns how many.
fn put_in_place<O: TypedOp>(
    model: &mut TypedModel,
    planned: impl Fn(&TypedModel, &TypedNode) -> TractResult<Option<O>>,
) -> TractResult<usize> {
    let mut replaced = 0;
    for id in 0..model.nodes.len() {
        if let Some(op) = planned(model, &model.nodes[id])? {
            model.nodes[id].op = Box::new(op);
            replaced += 1;
        }
    }
    Ok(replaced)
}

/// Applies the patch `patched` makes for a node, for every node it makes
/// one for; returns how many.
fn patch_each(
    model: &mut TypedModel,
    patched: impl Fn(&TypedModel, &TypedNode) -> TractResult<Option<TypedModelPatch>>,
) -> TractResult<usize> {
    let mut applied = 0;
    for id in 0..model.nodes.len() {
        if let Some(patch) = patched(model, &model.nodes[id])? {
            patch.apply(model)?;
            applied += 1;
        }
    }
    Ok(applied)
}

/// Whether `outlet` is read by one node alone, and is no output of the
/// model: a tensor that node may take in, so that it is never made.
fn read_once(model: &TypedModel, outlet: OutletId) -> TractResult<bool> {
    Ok(model.outlet_successors(outlet).len() == 1 && !model.output_outlets()?.contains(&outlet))
}

/// The output of the ReLU (`max(x, 0)`, its zero a constant second, as
/// tract wires it) that alone reads `outlet`, if one does.
fn lone_relu(model: &TypedModel, outlet: OutletId) -> TractResult<Option<OutletId>> {
    use tract_core::ops::binary::TypedBinOp;
    use tract_core::ops::math::Max;
    let [reader] = model.outlet_successors(outlet) else {
        return Ok(None);
    };
    let node = model.node(reader.node);
    let relu = OutletId::new(node.id, 0);
    let is_max = node
        .op_as::<TypedBinOp>()
        .is_some_and(|op| op.0.is::<Max>());
    let zero = node
        .inputs
        .get(1)
        .and_then(|&zero| model.outlet_fact(zero).ok()?.konst.clone());
    let zero = zero.is_some_and(|zero| {
        zero.datum_type() == f32::datum_type()
            && zero.try_as_plain_ram().is_ok_and(|plain| {
                plain
                    .as_slice::<f32>()
                    .is_ok_and(|values| values.iter().all(|&v| v == 0.0))
            })
    });
    let found = is_max
        && zero
        && node.inputs.len() == 2
        && node.inputs[0] == outlet
        && !model.output_outlets()?.contains(&outlet)
        && model.outlet_fact(relu)?.shape == model.outlet_fact(outlet)?.shape;
    Ok(found.then_some(relu))
}

/// `model`'s output on an input of `shape` as tract plans it, and after
/// `plan` put cutout's operators in; and how many `plan` put in.
#[cfg(test)]
fn tract_and_planned(
    model: TypedModel,
    shape: [usize; 4],
    plan: impl FnOnce(&mut TypedModel) -> TractResult<usize>,
) -> (Tensor, Tensor, usize) {
    let values: Vec<f32> = (0..shape.iter().product::<usize>())
        .map(|i| ((i * 7919) % 251) as f32 / 25.0 - 5.0)
        .collect();
    let input = Tensor::from_shape(&shape, &values).unwrap();
    let run = |model: TypedModel| {
        let outputs = model
            .into_runnable()
            .unwrap()
            .run(tvec!(input.clone().into()))
            .unwrap();
        outputs[0].clone().into_tensor()
    };
    let mut planned = model.clone();
    let replaced = plan(&mut planned).unwrap();
    (run(model), run(planned), replaced)
}

/// A model of one convolution of `outputs` channels over `input`, with
/// `padding` on every side, its weights and bias made up.
#[cfg(test)]
fn conv_model(
    input: [usize; 4],
    outputs: usize,
    kernel: [usize; 2],
    padding: usize,
    strides: [usize; 2],
    dilations: [usize; 2],
    group: usize,
) -> TypedModel {
    let mut model = TypedModel::default();
    let x = model.add_source("x", f32::fact(input)).unwrap();
    let out = wire_conv(
        &mut model, x, outputs, kernel, padding, strides, dilations, group,
    );
    model.select_output_outlets(&[out]).unwrap();
    model
}

/// A convolution of `outputs` channels over `x`, as `conv_model`'s.
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
fn wire_conv(
    model: &mut TypedModel,
    x: OutletId,
    outputs: usize,
    kernel: [usize; 2],
    padding: usize,
    strides: [usize; 2],
    dilations: [usize; 2],
    group: usize,
) -> OutletId {
    let fact = model.outlet_fact(x).unwrap().clone();
    let inputs = fact.shape.as_concrete().unwrap()[1];
    let weights: Vec<f32> = (0..outputs * inputs / group * kernel[0] * kernel[1])
        .map(|i| ((i * 31) % 17) as f32 / 8.0 - 1.0)
        .collect();
    let weights =
        Tensor::from_shape(&[outputs, inputs / group, kernel[0], kernel[1]], &weights).unwrap();
    let bias: Vec<f32> = (0..outputs).map(|o| 2.5 + o as f32).collect();
    // In the input's type: f32, or f16 for an fp16 model.
    let [weights, bias] = [weights, tensor1(&bias)]
        .map(|values| values.cast_to_dt(fact.datum_type).unwrap().into_owned());
    // Named apart, so a model may have several.
    let name = format!("conv{}", model.nodes.len());
    let weights = model.add_const(format!("{name}.weights"), weights).unwrap();
    let bias = model.add_const(format!("{name}.bias"), bias).unwrap();
    let conv = conv_op(inputs, outputs, kernel, padding, strides, dilations, group);
    model.wire_node(name, conv, &[x, weights, bias]).unwrap()[0]
}

/// An NCHW convolution in f32, with `padding` on every side.
#[cfg(test)]
fn conv_op(
    inputs: usize,
    outputs: usize,
    kernel: [usize; 2],
    padding: usize,
    strides: [usize; 2],
    dilations: [usize; 2],
    group: usize,
) -> tract_core::ops::cnn::Conv {
    use tract_core::ops::cnn::{Conv, KernelFormat, PaddingSpec, PoolSpec};
    use tract_core::ops::nn::DataFormat;
    Conv {
        pool_spec: PoolSpec {
            data_format: DataFormat::NCHW,
            kernel_shape: kernel[..].into(),
            padding: PaddingSpec::Explicit(tvec![padding; 2], tvec![padding; 2]),
            dilations: Some(dilations[..].into()),
            strides: Some(strides[..].into()),
            input_channels: inputs,
            output_channels: outputs,
        },
        kernel_fmt: KernelFormat::OIHW,
        group,
        q_params: None,
    }
}

/// Asserts that `planned` is `tract`'s output to the bit.
#[cfg(test)]
fn assert_same_bits(tract: &Tensor, planned: &Tensor, label: &str) {
    assert_eq!(tract.shape(), planned.shape(), "{label}");
    let tract = tract.to_plain_array_view::<f32>().unwrap();
    let planned = planned.to_plain_array_view::<f32>().unwrap();
    let same = tract
        .iter()
        .zip(&planned)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(same, "{label}: {tract:?} != {planned:?}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 1x1 convolution of f16 weights over `inputs` channels to
    /// `outputs`, planned in f32 by `to_f32`, and its output on an input.
    fn f16_conv(
        inputs: usize,
        outputs: usize,
        to_f32: impl Fn(&mut TypedModel) -> TractResult<()>,
    ) -> (TypedModel, Tensor) {
        let mut model = TypedModel::default();
        let x = model.add_source("x", f16::fact([1, inputs, 2, 2])).unwrap();
        let out = wire_conv(&mut model, x, outputs, [1, 1], 0, [1, 1], [1, 1], 1);
        model.select_output_outlets(&[out]).unwrap();
        let mut model = model.into_decluttered().unwrap();
        to_f32(&mut model).unwrap();
        let optimised = model.into_optimized().unwrap();
        let input: Vec<f32> = (0..inputs * 4).map(|i| (i % 7) as f32 - 3.0).collect();
        let input = Tensor::from_shape(&[1, inputs, 2, 2], &input).unwrap();
        let output = optimised
            .clone()
            .into_runnable()
            .unwrap()
            .run(tvec!(input.into()))
            .unwrap();
        (optimised, output[0].clone().into_tensor())
    }

    #[test]
    fn an_f16_models_weights_are_f32_constants_in_its_plan() {
        let casts = |model: &TypedModel| {
            model
                .nodes
                .iter()
                .filter(|node| node.op.name() == "Cast")
                .count()
        };
        // Over a million weights: 2 MiB in f16, past what tract folds.
        let (inputs, outputs) = (1024, 1030);
        let (translated, tracts) = f16_conv(inputs, outputs, |model| {
            model.transform(&FloatPrecisionTranslator::new(
                DatumType::F16,
                DatumType::F32,
            ))
        });
        let (cast_once, ours) = f16_conv(inputs, outputs, to_f32);
        assert!(
            casts(&translated) > 0,
            "tract folds its casts now: to_f32 may go"
        );
        assert_eq!(casts(&cast_once), 0);
        assert_eq!(ours.datum_type(), DatumType::F32);
        assert_same_bits(&tracts, &ours, "f16 weights");
    }

    fn cpuinfo(vendor: &str, family: u32, flags: &str) -> String {
        let cpu = format!(
            "processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: 17\nflags\t\t: {flags}\n"
        );
        format!("{cpu}\n{}", cpu.replace("processor\t: 0", "processor\t: 1"))
    }

    #[test]
    fn only_amds_family_25_with_avx512_is_zen4() {
        assert!(is_zen4(&cpuinfo(
            "AuthenticAMD",
            25,
            "fpu avx2 fma avx512f avx512bw"
        )));
        // Zen 3: the same family without AVX-512; Zen 5: full-width AVX-512.
        assert!(!is_zen4(&cpuinfo("AuthenticAMD", 25, "fpu avx2 fma")));
        assert!(!is_zen4(&cpuinfo(
            "AuthenticAMD",
            26,
            "fpu avx2 fma avx512f"
        )));
        assert!(!is_zen4(&cpuinfo(
            "GenuineIntel",
            6,
            "fpu avx2 fma avx512f"
        )));
        assert!(!is_zen4(&cpuinfo(
            "AuthenticAMD",
            25,
            "fpu avx2 fma avx512fp16"
        )));
        assert!(!is_zen4(""));
    }
}
