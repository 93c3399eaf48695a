//! The parts of a matte, and dropping those far smaller than its subject:
//! a salient-object model also half-keeps a second thing in the frame, or
//! specks of the background, and those are what the caller did not ask for.

/// Alpha from which a pixel is sure foreground: a part's size is its sure
/// pixels.
const SURE: u8 = 128;
/// Alpha over which a pixel belongs to a part: its faint edge and shadow go
/// with it.
const FAINT: u8 = 5;

/// Keeps the parts of `matte` (rows of `width`) that hold a sure part at
/// least `smallest` times the largest sure part; every other pixel becomes 0.
/// Parts are 4-connected. A matte with no sure pixel is left as it is.
pub fn keep_main_parts(matte: &mut [u8], width: usize, smallest: f32) {
    let (sure, sizes) = label(matte, width, |a| a >= SURE);
    let Some(&largest) = sizes.iter().max() else {
        return;
    };
    let (parts, part_sizes) = label(matte, width, |a| a > FAINT);
    let mut keep = vec![false; part_sizes.len() + 1];
    for (&s, &part) in sure.iter().zip(&parts) {
        if s != 0 && sizes[s as usize - 1] as f32 >= smallest * largest as f32 {
            keep[part as usize] = true;
        }
    }
    // Label 0, at or under FAINT, is never kept.
    keep[0] = false;
    for (a, &part) in matte.iter_mut().zip(&parts) {
        if !keep[part as usize] {
            *a = 0;
        }
    }
}

/// Each pixel's 4-connected region of pixels that pass `inside` (1-based;
/// 0 outside), and the regions' sizes.
fn label(matte: &[u8], width: usize, inside: impl Fn(u8) -> bool) -> (Vec<u32>, Vec<u32>) {
    let mut labels = vec![0u32; matte.len()];
    let mut sizes = Vec::new();
    let mut stack = Vec::new();
    for start in 0..matte.len() {
        if labels[start] != 0 || !inside(matte[start]) {
            continue;
        }
        sizes.push(0);
        let label = sizes.len() as u32;
        labels[start] = label;
        stack.push(start);
        while let Some(i) = stack.pop() {
            sizes[label as usize - 1] += 1;
            let x = i % width;
            let left = (x > 0).then(|| i - 1);
            let right = (x + 1 < width).then_some(i + 1);
            let up = i.checked_sub(width);
            let down = Some(i + width).filter(|&j| j < matte.len());
            for j in [left, right, up, down].into_iter().flatten() {
                if labels[j] == 0 && inside(matte[j]) {
                    labels[j] = label;
                    stack.push(j);
                }
            }
        }
    }
    (labels, sizes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 10×6 matte from rows of characters: `#` sure, `+` faint, `.` empty.
    fn matte(rows: &[&str]) -> Vec<u8> {
        let alpha = |c| match c {
            '#' => 255,
            '+' => 60,
            _ => 0,
        };
        rows.iter().flat_map(|r| r.chars().map(alpha)).collect()
    }

    #[test]
    fn parts_far_smaller_than_the_subject_go_with_their_faint_edges() {
        let mut m = matte(&[
            "####+.....",
            "####+...#+",
            "####+.....",
            "####+..++.",
            "++++..+##.",
            "..........",
        ]);
        keep_main_parts(&mut m, 10, 0.2);
        // The 16-pixel subject and its edge stay; the 1-pixel speck and
        // the 2-pixel part with its faint ring go.
        assert_eq!(
            m,
            matte(&[
                "####+.....",
                "####+.....",
                "####+.....",
                "####+.....",
                "++++......",
                "..........",
            ])
        );
    }

    #[test]
    fn parts_near_the_subjects_size_stay_and_so_does_a_matte_with_nothing_sure() {
        let two = [
            "###...###.",
            "###...###.",
            "###.......",
            "..........",
            "..........",
            "++........",
        ];
        let mut m = matte(&two);
        keep_main_parts(&mut m, 10, 0.2);
        // The 6-pixel part is 2/3 of the 9-pixel one; the faint corner,
        // with nothing sure in it, goes.
        let mut expected = matte(&two);
        expected[50] = 0;
        expected[51] = 0;
        assert_eq!(m, expected);

        let faint = matte(&["++++......", "..........", "......+++."]);
        let mut m = faint.clone();
        keep_main_parts(&mut m, 10, 0.2);
        assert_eq!(m, faint);
    }

    #[test]
    fn parts_touch_only_along_rows_and_columns_and_rows_do_not_wrap() {
        let m = matte(&["#........#", "#.........", "...#......", "....#....."]);
        let (labels, sizes) = label(&m, 10, |a| a >= SURE);
        assert_eq!(sizes, [2, 1, 1, 1]);
        assert_eq!((labels[0], labels[10], labels[9]), (1, 1, 2));
        assert_eq!((labels[23], labels[34]), (3, 4));
    }
}
