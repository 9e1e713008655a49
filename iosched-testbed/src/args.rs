//! Command-line pieces shared by `iosched-hdd` and `cargo xtask disk up`: the model's
//! parameters as flags, and sizes such as `2G`.

use clap::Args;

use iosched_disk::DiskParams;

/// The disk model's parameters as flags; defaults are [`DiskParams::default`].
#[derive(Args, Clone, Debug)]
pub struct ModelArgs {
    /// Spindle speed (rotational latency is half a revolution).
    #[arg(long, default_value_t = DiskParams::default().rpm)]
    pub rpm: f64,
    /// Media transfer rate, MB/s (10^6 bytes).
    #[arg(long, default_value_t = DiskParams::default().transfer_mb_s)]
    pub transfer_mb_s: f64,
    /// Fixed cost per request, µs.
    #[arg(long, default_value_t = DiskParams::default().overhead_us)]
    pub overhead_us: f64,
    /// Shortest (track-to-track) seek, ms.
    #[arg(long, default_value_t = DiskParams::default().seek_min_ms)]
    pub seek_min_ms: f64,
    /// Full-stroke seek, ms.
    #[arg(long, default_value_t = DiskParams::default().seek_max_ms)]
    pub seek_max_ms: f64,
    /// Fraction of the stroke where seek time turns from square-root to linear growth.
    #[arg(long, default_value_t = DiskParams::default().seek_knee)]
    pub seek_knee: f64,
}

impl ModelArgs {
    pub fn params(&self) -> DiskParams {
        DiskParams {
            rpm: self.rpm,
            transfer_mb_s: self.transfer_mb_s,
            overhead_us: self.overhead_us,
            seek_min_ms: self.seek_min_ms,
            seek_max_ms: self.seek_max_ms,
            seek_knee: self.seek_knee,
        }
    }
}

/// The flags that give `params` to `iosched-hdd`.
pub fn model_flags(params: &DiskParams) -> Vec<String> {
    [
        ("--rpm", params.rpm),
        ("--transfer-mb-s", params.transfer_mb_s),
        ("--overhead-us", params.overhead_us),
        ("--seek-min-ms", params.seek_min_ms),
        ("--seek-max-ms", params.seek_max_ms),
        ("--seek-knee", params.seek_knee),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_string(), value.to_string()])
    .collect()
}

/// `4096`, `512K`, `64M`, `2G`, `1T` (binary multiples; an optional trailing `iB`/`B`).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(format!("{text:?}: unknown unit {c:?} (use K, M, G or T)")),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?}: not a size (examples: 4096, 512M, 2G)"))?;
    n.checked_mul(1 << shift)
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{text:?}: must be between 1 byte and 16 EiB"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn parses_sizes() {
        for (text, want) in [
            ("4096", 4096),
            ("512K", 512 << 10),
            ("64M", 64 << 20),
            ("2G", 2 << 30),
            ("2GiB", 2 << 30),
            ("1t", 1 << 40),
        ] {
            assert_eq!(parse_size(text), Ok(want), "{text}");
        }
        for bad in ["", "G", "-1", "1.5G", "3X", "0", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad} accepted");
        }
    }

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        model: ModelArgs,
    }

    #[test]
    fn flags_round_trip_through_clap() {
        let params = DiskParams {
            rpm: 5400.0,
            transfer_mb_s: 80.5,
            overhead_us: 0.0,
            seek_min_ms: 1.0,
            seek_max_ms: 15.0,
            seek_knee: 0.3,
        };
        let args = std::iter::once("x".to_string()).chain(model_flags(&params));
        assert_eq!(Cli::parse_from(args).model.params(), params);
        let defaults = Cli::parse_from(["x"]).model.params();
        assert_eq!(defaults, DiskParams::default());
    }
}
