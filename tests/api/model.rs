//! The real model on a real photograph (a GrabCut test image with its
//! ground-truth mask, read from ../shared/eval; never copied here).

use crate::helpers::*;
use std::path::Path;

#[test]
fn the_subject_comes_out_opaque_and_the_background_clear() {
    let set = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/eval/dev/grabcut");
    let photo = std::fs::read(set.join("images/106024.jpg"))
        .expect("../shared/eval is beside the checkout");
    let truth = image::open(set.join("gt/106024.bmp")).unwrap().to_luma8();

    let app = spawn_app();
    let key = app.account("acme", "pro");
    let out = app.post_image(Some(&key), &photo, None).png();
    assert_eq!(out.dimensions(), truth.dimensions());

    let (mut subject, mut subject_opaque, mut background, mut background_clear) = (0, 0, 0, 0);
    for (t, o) in truth.pixels().zip(out.pixels()) {
        match t.0[0] {
            255 => {
                subject += 1;
                subject_opaque += u32::from(o.0[3] >= 200);
            }
            0 => {
                background += 1;
                background_clear += u32::from(o.0[3] <= 55);
            }
            _ => {} // the boundary band is left out, as the scorer does
        }
    }
    assert!(
        subject_opaque * 100 >= subject * 90,
        "{subject_opaque} of {subject} subject pixels opaque"
    );
    assert!(
        background_clear * 100 >= background * 95,
        "{background_clear} of {background} background pixels clear"
    );
}
