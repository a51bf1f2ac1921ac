//! std.augment in `map` functions: `normalize`, `random_flip` and
//! `random_crop` give each element its own random choice, keyed by the
//! element's index, the epoch and the seed — the same at every `parallel`
//! setting — and every output is a valid augmentation of its input.

mod support;
use support::*;

/// The numbers of a printed tensor (`f32[2, 2] [[1, 2], [3, 4]]` → 1 2 3 4).
fn numbers(printed: &str) -> Vec<f64> {
    let body = printed.split_once("] ").map(|(_, b)| b).unwrap_or("");
    body.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == 'e'))
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap_or_else(|_| panic!("not a number: {s}")))
        .collect()
}

const IMAGES: &str = "let imgs = reshape(arange(20 * 3 * 3, dtype = f32) + 1.0, [20, 3, 3, 1])\n";

#[test]
fn random_flip_is_per_element_and_independent_of_parallel() {
    let d = scratch("flip");
    let program = |par: &str| {
        format!(
            "use std.augment.{{random_flip}}\n{IMAGES}print(collect(from_tensors(imgs) |> map(fn(x) = random_flip(x, seed = 5){par}) |> prefetch(2)))\n"
        )
    };
    let reference = ok(&d, &program(""));
    for par in [", parallel = 1", ", parallel = 3", ", parallel = auto"] {
        assert_eq!(ok(&d, &program(par)), reference, "{par}");
    }
    let v = numbers(reference.trim());
    assert_eq!(v.len(), 180);
    let (mut flipped, mut kept) = (0, 0);
    for i in 0..20 {
        let img = &v[i * 9..(i + 1) * 9];
        let orig: Vec<f64> = (0..9).map(|k| (i * 9 + k + 1) as f64).collect();
        let mirrored: Vec<f64> = (0..9).map(|k| (i * 9 + (k / 3) * 3 + (2 - k % 3) + 1) as f64).collect();
        if img == orig.as_slice() {
            kept += 1;
        } else if img == mirrored.as_slice() {
            flipped += 1;
        } else {
            panic!("image {i} is neither the input nor its mirror: {img:?}");
        }
    }
    assert!(flipped >= 3 && kept >= 3, "{flipped} flipped, {kept} kept: the choice must vary per element");
}

#[test]
fn random_crop_picks_a_shifted_window_per_element() {
    let d = scratch("crop");
    let program = |par: &str| {
        format!(
            "use std.augment.{{random_crop}}\n{IMAGES}print(collect(from_tensors(imgs) |> map(fn(x) = random_crop(x, 1, seed = 2){par})))\n"
        )
    };
    let reference = ok(&d, &program(""));
    assert_eq!(ok(&d, &program(", parallel = 2")), reference);
    let v = numbers(reference.trim());
    assert_eq!(v.len(), 180);
    let mut shifts = std::collections::BTreeSet::new();
    for i in 0..20 {
        let img = &v[i * 9..(i + 1) * 9];
        // Padded by one zero: P[r][c] = image value at (r - 1, c - 1), or 0.
        let p = |r: i64, c: i64| {
            if (1..=3).contains(&r) && (1..=3).contains(&c) {
                (i as i64 * 9 + (r - 1) * 3 + (c - 1) + 1) as f64
            } else {
                0.0
            }
        };
        let found = (0..3i64)
            .flat_map(|ky| (0..3i64).map(move |kx| (ky, kx)))
            .find(|&(ky, kx)| (0..9).all(|k| img[k as usize] == p(k / 3 + ky, k % 3 + kx)));
        match found {
            Some(s) => {
                shifts.insert(s);
            }
            None => panic!("image {i} is not a window of the padded input: {img:?}"),
        }
    }
    assert!(shifts.len() >= 4, "only shifts {shifts:?} over 20 elements");
}

#[test]
fn normalize_and_other_seeds() {
    let d = scratch("normalize");
    assert_eq!(
        ok(&d, "use std.augment.{normalize}\nprint(normalize([[1.0, 2.0], [3.0, 6.0]], [1.0, 2.0], [2.0, 4.0]))\n"),
        "f32[2, 2] [[0, 0], [1, 1]]\n"
    );
    let program = |seed: u32| {
        format!("use std.augment.{{random_flip}}\n{IMAGES}print(collect(from_tensors(imgs) |> map(fn(x) = random_flip(x, seed = {seed}))))\n")
    };
    assert_ne!(ok(&d, &program(1)), ok(&d, &program(2)), "another seed must give other choices");
}
