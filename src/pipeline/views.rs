//! The policy of views: how `type=auto` combines the mattes of several
//! views of one photo (the blend, with its doubt and agreement gates) and
//! when it takes the person model's second opinion. The thresholds come
//! from the manifest (`blend`, `second_opinion`); the mattes from the
//! pipeline, which runs the models. Nothing here runs a model.

use crate::engine::preprocess::apply_levels;
use crate::engine::{Blend, SecondOpinion};
use crate::imaging;

/// `type=auto`'s blend: the mean of the model's own views (`own`, the
/// first its view at the model's input, before levels) and `others`, the
/// blended models' views, all on the first's grid, levelled. Where the own
/// views see no subject at all they have missed it (a photo sent to be cut
/// out has one): where another model sees one, the others' views alone
/// make the matte (BENCHMARKS.md, "Views that see nothing").
pub fn blend(own: &[Vec<u8>], others: &[Vec<u8>], blend: &Blend) -> Vec<u8> {
    let first = &own[0];
    let mut own_sum = vec![0u16; first.len()];
    // The union of the own views' silhouettes, as a matte.
    let mut own_union = vec![0u8; first.len()];
    let mut least_agreement = 1.0f64;
    for view in own {
        least_agreement = least_agreement.min(silhouettes_agree(first, view));
        for ((s, union), &a) in own_sum.iter_mut().zip(&mut own_union).zip(view) {
            *s += u16::from(a);
            *union |= silhouette(a);
        }
    }
    let own_subject = own_union.iter().filter(|&&a| is_subject(a)).count() as f64;
    let doubt = blend.doubt.filter(|doubt| least_agreement < doubt.below);
    let mut sum = vec![0u16; first.len()];
    let mut views = 0;
    let mut others_see = false;
    for view in others {
        let subject = view.iter().filter(|&&a| is_subject(a)).count() as f64;
        others_see |= subject > 0.0;
        let sees_more = match doubt {
            Some(doubt) if subject > doubt.others_larger_by * own_subject => doubt.others_count,
            _ => 1,
        };
        let agrees = match blend.agree {
            Some(agree) if silhouettes_agree(&own_union, view) > agree.over => agree.others_count,
            _ => 1,
        };
        let weight = sees_more.max(agrees);
        for (s, &a) in sum.iter_mut().zip(view) {
            *s += weight * u16::from(a);
        }
        views += weight;
    }
    if own_subject > 0.0 || !others_see {
        for (s, o) in sum.iter_mut().zip(own_sum) {
            *s += o;
        }
        views += own.len() as u16;
    }
    let mut matte: Vec<u8> = sum
        .iter()
        .map(|&s| ((s + views / 2) / views) as u8)
        .collect();
    apply_levels(&mut matte, blend.levels);
    matte
}

/// The per-pixel median of `mattes`, all on one grid (`Median`): of an
/// even count, the mean of the middle two.
pub fn median(mattes: &[Vec<u8>]) -> Vec<u8> {
    let mut values = Vec::with_capacity(mattes.len());
    (0..mattes[0].len())
        .map(|i| {
            values.clear();
            values.extend(mattes.iter().map(|m| m[i]));
            values.sort_unstable();
            let n = values.len();
            (u16::from(values[(n - 1) / 2]) + u16::from(values[n / 2])).div_ceil(2) as u8
        })
        .collect()
}

/// Whether the model's other views (`blend.inputs`) are worth their cost:
/// where its first view's silhouette agrees with each blended model's on
/// under `more_views_below` (intersection over union), where it sees no
/// subject at all, or where no blended model is there to say
/// (BENCHMARKS.md, "Views where in doubt").
pub fn more_views_wanted(blend: &Blend, first: &[u8], others: &[Vec<u8>]) -> bool {
    let Some(below) = blend.more_views_below else {
        return true;
    };
    let sees_nothing = !first.iter().any(|&a| is_subject(a));
    sees_nothing || others.is_empty() || others.iter().any(|o| silhouettes_agree(first, o) < below)
}

/// Whether a matte is unsure enough of its subject to ask the person model.
pub fn worth_asking(opinion: &SecondOpinion, first: &[u8]) -> bool {
    unsure(first) > opinion.ask_when_unsure_over
}

/// Whether the person model's matte `second` replaces `first` (each with
/// its grid's size): it is far surer of the subject and agrees with the
/// first on most of it.
pub fn second_wins(
    opinion: &SecondOpinion,
    (first, first_size): (&[u8], (u32, u32)),
    (second, second_size): (&[u8], (u32, u32)),
) -> bool {
    let (first_unsure, second_unsure) = (unsure(first), unsure(second));
    let agree = agreement(first, first_size, second, second_size);
    log::debug!(
        "second opinion: unsure {first_unsure:.3} -> {second_unsure:.3}, agreement {agree:.2}"
    );
    second_unsure < first_unsure * opinion.keep_when_unsure_under && agree > opinion.agree_over
}

/// A matte's silhouette: alpha 0.5 and over.
fn is_subject(alpha: u8) -> bool {
    alpha >= 128
}

/// A matte's silhouette as a matte: opaque where it is subject, clear elsewhere.
fn silhouette(alpha: u8) -> u8 {
    if is_subject(alpha) {
        255
    } else {
        0
    }
}

/// How much of what two mattes on one grid call subject both do: their
/// silhouettes' intersection over union. Two empty mattes agree.
fn silhouettes_agree(first: &[u8], second: &[u8]) -> f64 {
    let (mut both, mut either) = (0u64, 0u64);
    for (a, b) in first
        .iter()
        .zip(second)
        .map(|(&a, &b)| (is_subject(a), is_subject(b)))
    {
        both += u64::from(a && b);
        either += u64::from(a || b);
    }
    if either == 0 {
        1.0
    } else {
        both as f64 / either as f64
    }
}

/// Alpha from 0.05 to 0.95: neither subject nor background.
const PARTIAL: std::ops::Range<u8> = 13..243;

/// How much of what a matte calls subject (alpha over 0.05) it is unsure
/// of: a model sure of its subject leaves only a rim partial. A matte
/// with no subject is sure of nothing.
pub fn unsure(matte: &[u8]) -> f64 {
    let (mut subject, mut partial) = (0usize, 0usize);
    for &a in matte.iter().filter(|&&a| a >= PARTIAL.start) {
        subject += 1;
        partial += usize::from(a < PARTIAL.end);
    }
    match subject {
        0 => 1.0,
        _ => partial as f64 / subject as f64,
    }
}

/// How far two mattes of one photo call the same pixels subject: the sum
/// of their smaller alpha over the sum of their larger (1 the same, 0
/// disjoint), compared at the first's size.
pub fn agreement(
    first: &[u8],
    first_size: (u32, u32),
    second: &[u8],
    second_size: (u32, u32),
) -> f64 {
    let second = imaging::resize_gray(second, second_size, first_size);
    let (mut both, mut either) = (0u64, 0u64);
    for (&a, &b) in first.iter().zip(&second) {
        both += u64::from(a.min(b));
        either += u64::from(a.max(b));
    }
    both as f64 / either.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Agree, Doubt};

    #[test]
    fn the_median_keeps_what_most_mattes_say_and_outvotes_one_alone() {
        // One matte sees a blob the others do not; one loses a person the
        // others keep; all three agree on the rest.
        let blob = vec![0, 255, 200, 30];
        let lost = vec![0, 0, 210, 40];
        let kept = vec![0, 10, 220, 0];
        assert_eq!(
            median(&[blob.clone(), lost.clone(), kept]),
            [0, 10, 210, 30]
        );
        assert_eq!(median(&[blob, lost]), [0, 128, 205, 35], "two: their mean");
    }

    /// A `w`×`h` matte: a disc of radius `r` at the centre, opaque inside,
    /// with a one-pixel partial rim, and `inside` as the disc's alpha.
    fn disc(w: u32, h: u32, r: f64, inside: u8) -> Vec<u8> {
        let (cx, cy) = (f64::from(w) / 2.0, f64::from(h) / 2.0);
        (0..h)
            .flat_map(|y| (0..w).map(move |x| (f64::from(x) + 0.5, f64::from(y) + 0.5)))
            .map(|(x, y)| {
                let d = ((x - cx).powi(2) + (y - cy).powi(2)).sqrt();
                if d < r - 1.0 {
                    inside
                } else if d < r {
                    128
                } else {
                    0
                }
            })
            .collect()
    }

    /// A `width`×1 matte, opaque on its first `opaque` pixels.
    fn left(width: usize, opaque: usize) -> Vec<u8> {
        (0..width)
            .map(|x| if x < opaque { 255 } else { 0 })
            .collect()
    }

    /// A blend's gates and levels as the manifest sets them for IS-Net.
    fn isnet_blend() -> Blend {
        let manifest = crate::engine::Manifest::builtin();
        manifest
            .require(Some("isnet"))
            .unwrap()
            .blend
            .clone()
            .unwrap()
    }

    #[test]
    fn views_that_agree_are_averaged_and_levelled() {
        let blend = isnet_blend();
        assert_eq!(blend.levels, [0.35, 0.55]);
        // Own views 0.6 and 0.6, the other 0: a mean of 0.4, levelled to 0.25.
        let matte = super::blend(&[vec![153; 4], vec![153; 4]], &[vec![0; 4]], &blend);
        assert!(matte.iter().all(|&a| a.abs_diff(64) <= 1), "{matte:?}");
    }

    #[test]
    fn the_others_count_twice_where_the_own_views_disagree_and_they_see_more() {
        let blend = isnet_blend();
        let (doubt, agree) = (blend.doubt.unwrap(), blend.agree.unwrap());
        assert_eq!(
            (doubt.below, doubt.others_larger_by, doubt.others_count),
            (0.8, 1.2, 2)
        );
        assert_eq!((agree.over, agree.others_count), (0.8, 2));
        // Own views: the left half and the left quarter (they agree on
        // half); the other: the left 0.9, more than 1.2 times the half.
        // At 0.7 of the width only the other sees the subject: 2 / 4.
        let own = [left(100, 50), left(100, 25)];
        let matte = super::blend(&own, &[left(100, 90)], &blend);
        assert!(matte[70].abs_diff(194) <= 2, "{}", matte[70]);
        // Without the doubt gate it counts once: 1 / 3, under the levels.
        let trusting = Blend {
            doubt: None,
            ..blend.clone()
        };
        assert_eq!(super::blend(&own, &[left(100, 90)], &trusting)[70], 0);
        // Own views that agree: the other's left 0.7 agrees with them on
        // 0.71, not over 0.8, and counts once.
        let own = [left(100, 50), left(100, 50)];
        assert_eq!(super::blend(&own, &[left(100, 70)], &blend)[60], 0);
        // The other's left 0.55 agrees on 0.91 and counts twice: 2 / 4.
        let matte = super::blend(&own, &[left(100, 55)], &blend);
        assert!(matte[52].abs_diff(194) <= 2, "{}", matte[52]);
        let never = Blend {
            agree: Some(Agree {
                over: 1.0,
                others_count: 2,
            }),
            doubt: Some(Doubt {
                below: 0.0,
                others_larger_by: 1.0,
                others_count: 2,
            }),
            ..blend
        };
        assert_eq!(super::blend(&own, &[left(100, 55)], &never)[52], 0);
    }

    #[test]
    fn the_others_alone_make_the_matte_where_the_own_views_see_nothing() {
        let blend = isnet_blend();
        // Own views 0.2 call nothing subject; the other sees the left half.
        let own = [vec![51; 100], vec![51; 100]];
        let matte = super::blend(&own, &[left(100, 50)], &blend);
        assert_eq!((matte[10], matte[90]), (255, 0));
        // Where no view sees a subject, all of them count.
        let matte = super::blend(&own, &[vec![0; 100]], &blend);
        assert_eq!(matte[10], 0, "(0.2 + 0.2 + 0) / 3, under the levels");
    }

    #[test]
    fn a_second_opinion_is_asked_when_unsure_and_kept_when_far_surer_and_agreeing() {
        let manifest = crate::engine::Manifest::builtin();
        let isnet = manifest.require(Some("isnet")).unwrap();
        let opinion = isnet.second_opinion.expect("IS-Net asks for one");
        let sure = disc(100, 100, 30.0, 255);
        let grey = disc(100, 100, 30.0, 200);
        assert!(!worth_asking(&opinion, &sure));
        assert!(worth_asking(&opinion, &grey));
        let size = (100, 100);
        assert!(second_wins(&opinion, (&grey, size), (&sure, size)));
        assert!(
            !second_wins(&opinion, (&sure, size), (&sure, size)),
            "not surer"
        );
        let elsewhere = disc(100, 100, 10.0, 255);
        assert!(
            !second_wins(&opinion, (&grey, size), (&elsewhere, size)),
            "surer, but of a part of the subject"
        );
    }

    #[test]
    fn silhouettes_agree_on_their_intersection_over_their_union() {
        let left = [255, 255, 200, 0];
        assert_eq!(silhouettes_agree(&left, &left), 1.0);
        assert_eq!(silhouettes_agree(&left, &[0, 255, 255, 127]), 2.0 / 3.0);
        assert_eq!(silhouettes_agree(&left, &[0, 0, 0, 127]), 0.0);
        assert_eq!(silhouettes_agree(&[0; 4], &[127; 4]), 1.0, "both empty");
    }

    #[test]
    fn a_matte_is_unsure_where_its_subject_is_partial() {
        let sure = unsure(&disc(100, 100, 30.0, 255));
        assert!(sure < 0.1, "only the rim is partial: {sure}");
        assert_eq!(unsure(&disc(100, 100, 30.0, 128)), 1.0, "all grey");
        let half = unsure(&[255, 255, 128, 128, 0, 0]);
        assert!((half - 0.5).abs() < 1e-9, "{half}");
        assert_eq!(unsure(&[0; 64]), 1.0, "no subject: sure of nothing");
        assert_eq!(unsure(&[12; 64]), 1.0, "alpha under 0.05 is no subject");
    }

    #[test]
    fn mattes_agree_on_the_same_subject_at_any_size() {
        let first = disc(200, 150, 50.0, 255);
        let same = agreement(&first, (200, 150), &first, (200, 150));
        assert!((same - 1.0).abs() < 1e-9);
        // The same disc on a grid of another size and aspect.
        let second = disc(100, 75, 25.0, 255);
        let scaled = agreement(&first, (200, 150), &second, (100, 75));
        assert!(scaled > 0.95, "{scaled}");
        let elsewhere: Vec<u8> = disc(200, 150, 50.0, 255)
            .chunks(200)
            .flat_map(|row| {
                row.iter()
                    .cycle()
                    .skip(100)
                    .take(200)
                    .copied()
                    .collect::<Vec<_>>()
            })
            .collect();
        let apart = agreement(&first, (200, 150), &elsewhere, (200, 150));
        assert!(apart < 0.05, "disjoint discs: {apart}");
        let smaller = agreement(&first, (200, 150), &disc(200, 150, 25.0, 255), (200, 150));
        assert!(
            (0.2..0.3).contains(&smaller),
            "a quarter of the area: {smaller}"
        );
        assert_eq!(
            agreement(&[0; 4], (2, 2), &[0; 4], (2, 2)),
            0.0,
            "nothing to agree on"
        );
    }
}
