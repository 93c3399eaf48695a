//! The output of cutout's planned operators, written a plane at a time on
//! every core. It is not zeroed first: each plane's fill writes every value
//! of its plane, so the fresh pages are first touched by the threads that
//! write them, not faulted in and zeroed by one thread before. Zeroing
//! took a third of a MODNet run's page faults, all on the run's own thread
//! (BENCHMARKS.md, "tract's planned operators unzeroed").

use rayon::prelude::*;
use std::mem::MaybeUninit;
use tract_core::internal::*;
use tract_linalg::multithread::{current_tract_executor, Executor};

/// An f32 tensor of `output`'s NCHW shape, each of its planes written by
/// `fill` from the same plane of `inputs` (shapes `planned`) joined on the
/// channel axis, the planes on tract's thread pool; `scratch` makes each
/// thread's scratch. `fill` is given the plane's index in the output and
/// must write every value of it.
pub(super) fn plane_by_plane<S>(
    inputs: &[TValue],
    planned: &[[usize; 4]],
    output: [usize; 4],
    scratch: impl Fn() -> S + Send + Sync,
    fill: impl Fn(&mut S, usize, &[f32], &mut [MaybeUninit<f32>]) + Send + Sync,
) -> TractResult<Tensor> {
    ensure!(
        inputs.len() == planned.len()
            && inputs
                .iter()
                .zip(planned)
                .all(|(input, shape)| input.shape() == shape && shape[2] * shape[3] > 0),
        "planned for inputs of {planned:?}"
    );
    let plains = inputs
        .iter()
        .map(|input| input.try_as_plain_ram())
        .collect::<TractResult<Vec<_>>>()?;
    let values = plains
        .iter()
        .map(|plain| plain.as_slice::<f32>())
        .collect::<TractResult<Vec<_>>>()?;
    let mut planes: Vec<&[f32]> = Vec::with_capacity(output[0] * output[1]);
    for batch in 0..output[0] {
        for (values, &[_, channels, height, width]) in values.iter().zip(planned) {
            let one = channels * height * width;
            planes.extend(values[batch * one..][..one].chunks(height * width));
        }
    }
    let plane = output[2] * output[3];
    ensure!(
        planes.len() == output[0] * output[1] && plane > 0,
        "{planned:?} do not join into {output:?}"
    );
    // SAFETY: an f32 tensor of `output`'s shape; every value is written
    // below, by `fill`, before the tensor is handed on.
    let mut tensor = unsafe { Tensor::uninitialized::<f32>(&output)? };
    // SAFETY: the tensor's `len` f32s, seen as what they are until filled:
    // uninitialised. The slice is the only view of them while it lives.
    let to = unsafe {
        std::slice::from_raw_parts_mut(
            tensor.as_ptr_mut::<f32>()?.cast::<MaybeUninit<f32>>(),
            tensor.len(),
        )
    };
    if cfg!(test) {
        // A fill that misses a value then leaves NaN, which the tests see.
        to.fill(MaybeUninit::new(f32::NAN));
    }
    let mut run = || {
        to.par_chunks_mut(plane)
            .zip(planes.par_iter())
            .enumerate()
            .for_each_init(&scratch, |scratch, (index, (out, plane))| {
                fill(scratch, index, plane, out)
            })
    };
    match current_tract_executor() {
        Executor::MultiThread(pool) => pool.install(run),
        _ => run(),
    }
    Ok(tensor)
}
