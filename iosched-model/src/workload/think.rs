//! The think time a released Q is replayed with: a gap after a long sleep holds an idle
//! CPU's wake-up, which is cut to the process's own think time.
//!
//! Owns: [`think_floor`], [`think_delays`]. Must not: decide which Q a completion released.

/// A process slept at least this long before the completion that released its next Q: its
/// gap (completion -> Q) includes waking a CPU that went idle meanwhile, not only its think
/// time. On this project's 2-vCPU VM, fio's gap is ~9 µs after a 0.2 ms sleep and 25-130 µs
/// after a 7-60 ms one (the multi-reader recordings, under bfq and none).
pub const LONG_SLEEP_NS: u64 = 1_000_000;
/// A process's think time is the gap below which only this share of its gaps fall: a gap
/// cannot be shorter than the program's own work, so its low end is the work plus the least
/// wake-up latency, where its mean also holds every slow wake-up.
pub const THINK_PERCENTILE: f64 = 0.05;
/// Gaps needed before their low end says anything.
pub const THINK_MIN_GAPS: usize = 20;

/// One released Q of a closed-loop process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThinkGap {
    /// From the process's previous submission to the completion that released it.
    pub slept_ns: u64,
    /// From that completion to the Q.
    pub gap_ns: u64,
}

/// The process's think time: the [`THINK_PERCENTILE`] of its gaps; `None` with fewer than
/// [`THINK_MIN_GAPS`].
pub fn think_floor(gaps: &[ThinkGap]) -> Option<u64> {
    if gaps.len() < THINK_MIN_GAPS {
        return None;
    }
    let mut g: Vec<u64> = gaps.iter().map(|g| g.gap_ns).collect();
    g.sort_unstable();
    Some(g[((g.len() - 1) as f64 * THINK_PERCENTILE) as usize])
}

/// The delay each released Q is replayed with. A gap after a long sleep
/// ([`LONG_SLEEP_NS`]) is cut to the process's think time ([`think_floor`]): what it holds
/// beyond that is the wake-up of an idle CPU, which a replay that lets the process sleep
/// less (a sequential reader served back to back under BFQ instead of interleaved under
/// none) would not pay, and BFQ would idle through. Where the replay keeps the sleep long,
/// the cut costs tens of µs against milliseconds of sleep. Gaps after short sleeps are kept:
/// they are the process's own pace, whatever it does between I/Os.
pub fn think_delays(gaps: &[ThinkGap]) -> Vec<u64> {
    let floor = think_floor(gaps);
    gaps.iter()
        .map(|g| match floor {
            Some(f) if g.slept_ns >= LONG_SLEEP_NS => g.gap_ns.min(f),
            _ => g.gap_ns,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program with a known think time (10 µs) whose every other gap, after a long sleep,
    /// also holds a wake-up of 20-150 µs; one in ten wake-ups is free (the CPU was awake).
    /// The floor recovers the think time; gaps after long sleeps are replayed with it, gaps
    /// after short sleeps as recorded.
    #[test]
    fn think_time_is_the_low_end_of_gaps_after_long_sleeps() {
        const THINK: u64 = 10_000;
        let mut gaps = Vec::new();
        let mut rng = 7u64;
        for k in 0..400u64 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let wake = if k % 10 == 0 {
                0
            } else {
                20_000 + (rng >> 33) % 130_000
            };
            gaps.push(ThinkGap {
                slept_ns: 13_000_000,
                gap_ns: THINK + wake,
            });
        }
        // A short sleep: its gap is the program's pace, kept whatever it is.
        gaps.push(ThinkGap {
            slept_ns: 200_000,
            gap_ns: 70_000,
        });
        assert_eq!(think_floor(&gaps), Some(THINK));
        let delays = think_delays(&gaps);
        assert!(delays[..400].iter().all(|d| *d == THINK), "{delays:?}");
        assert_eq!(delays[400], 70_000);
        // Too few gaps to know their low end: all kept.
        let few = &gaps[1..THINK_MIN_GAPS];
        assert_eq!(think_floor(few), None);
        assert_eq!(
            think_delays(few),
            few.iter().map(|g| g.gap_ns).collect::<Vec<_>>()
        );
    }
}
