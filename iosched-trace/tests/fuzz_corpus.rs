//! The fuzz corpus replayed on stable, so CI needs no nightly: every committed seed
//! (fuzz/corpus/TARGET/) and every input a fuzzer once crashed on (fuzz/regressions/TARGET/)
//! goes through the same entry points the fuzz targets call ([`iosched_trace::untrusted`]),
//! and so do cheap deterministic damages of each seed (cut at many lengths, bytes flipped),
//! the damage a cut stream or a bad disk does. A panic anywhere fails the test.

use std::{
    fs,
    path::{Path, PathBuf},
};

use iosched_trace::untrusted::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

fn inputs(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, Vec<u8>)> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != "README.md"))
        .map(|p| {
            let bytes = fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    out.sort();
    out
}

/// Cuts at 0..64 and at 64 points spread over the input, and 64 single-byte flips at spread
/// offsets (a small linear congruential walk: the same every run).
fn damages(seed: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let n = seed.len();
    for cut in (0..n.min(64)).chain((0..64).map(|i| i * n / 64)) {
        out.push(seed[..cut].to_vec());
    }
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..64 {
        if n == 0 {
            break;
        }
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let at = (x >> 33) as usize % n;
        let mut v = seed.to_vec();
        v[at] ^= (x >> 8) as u8 | 1;
        out.push(v);
    }
    out
}

#[test]
fn every_target_has_seeds_and_none_of_them_or_their_damage_panics() {
    for (name, entry) in TARGETS {
        let seeds = inputs(&fuzz_dir().join("corpus").join(name));
        assert!(!seeds.is_empty(), "no seed corpus for fuzz target {name}");
        let mut runs = 0;
        for (path, bytes) in &seeds {
            entry(bytes);
            for damaged in damages(bytes) {
                entry(&damaged);
                runs += 1;
            }
            eprintln!("{name}: {} and its damages", path.display());
        }
        assert!(runs >= seeds.len() * 64, "{name}: {runs} runs");
    }
}

#[test]
fn every_input_a_fuzzer_crashed_on_is_fixed() {
    for (name, entry) in TARGETS {
        for (path, bytes) in inputs(&fuzz_dir().join("regressions").join(name)) {
            eprintln!("{name}: {}", path.display());
            entry(&bytes);
        }
    }
}
