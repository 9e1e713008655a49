//! Command-line pieces shared by `iosched-hdd` and `cargo xtask disk up`: the device kind,
//! the models' parameters as flags, and disk sizes such as `2G`.

use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};

use iosched_core::units::parse_size;
use iosched_disk::{DiskParams, FlashParams};

/// Which device the emulation stands in for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// A rotational disk (`DiskParams`): one request at a time, seeks, rotation.
    #[default]
    Hdd,
    /// A flash device (`FlashParams`): parallel channels, fixed latencies.
    Flash,
}

impl DeviceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceKind::Hdd => "hdd",
            DeviceKind::Flash => "flash",
        }
    }
}

/// The flash model's parameters as flags; defaults are [`FlashParams::default`].
#[derive(Args, Clone, Debug)]
pub struct FlashArgs {
    /// Flash: requests served at once.
    #[arg(long, default_value_t = FlashParams::default().channels)]
    pub channels: u32,
    /// Flash: fixed cost of a read, µs.
    #[arg(long, default_value_t = FlashParams::default().read_latency_us)]
    pub read_latency_us: f64,
    /// Flash: fixed cost of a write, µs.
    #[arg(long, default_value_t = FlashParams::default().write_latency_us)]
    pub write_latency_us: f64,
    /// Flash: read transfer rate of one channel, MB/s.
    #[arg(long, default_value_t = FlashParams::default().read_mb_s)]
    pub read_mb_s: f64,
    /// Flash: write transfer rate of one channel, MB/s.
    #[arg(long, default_value_t = FlashParams::default().write_mb_s)]
    pub write_mb_s: f64,
    /// Flash: a volatile write cache (writes acknowledged after --write-ack-us, FSYNC waits
    /// for the writes before it).
    #[arg(long)]
    pub write_cache: bool,
    /// Flash with --write-cache: time to acknowledge a write, µs.
    #[arg(long, default_value_t = FlashParams::default().write_ack_us)]
    pub write_ack_us: f64,
    /// Flash with --write-cache: cache size, KiB (writes accepted and not yet done).
    #[arg(long, default_value_t = FlashParams::default().write_cache_kb)]
    pub write_cache_kb: u64,
}

impl FlashArgs {
    pub fn params(&self) -> FlashParams {
        FlashParams {
            channels: self.channels,
            read_latency_us: self.read_latency_us,
            write_latency_us: self.write_latency_us,
            read_mb_s: self.read_mb_s,
            write_mb_s: self.write_mb_s,
            write_cache: self.write_cache,
            write_ack_us: self.write_ack_us,
            write_cache_kb: self.write_cache_kb,
        }
    }
}

/// The flags that give `params` to `iosched-hdd` (with `--kind flash`).
pub fn flash_flags(params: &FlashParams) -> Vec<String> {
    let mut flags: Vec<String> = [
        ("--channels", f64::from(params.channels)),
        ("--read-latency-us", params.read_latency_us),
        ("--write-latency-us", params.write_latency_us),
        ("--read-mb-s", params.read_mb_s),
        ("--write-mb-s", params.write_mb_s),
        ("--write-ack-us", params.write_ack_us),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_string(), value.to_string()])
    .collect();
    flags.extend(["--write-cache-kb".into(), params.write_cache_kb.to_string()]);
    if params.write_cache {
        flags.push("--write-cache".into());
    }
    flags
}

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

/// A disk's size: [`parse_size`]'s grammar (`2G`, `1T`, `64MiB`), and at least one byte.
pub fn parse_disk_size(text: &str) -> Result<u64, String> {
    match parse_size(text)? {
        0 => Err(format!("{text:?}: a disk needs at least one byte")),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn a_disk_has_a_size() {
        assert_eq!(parse_disk_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_disk_size("1t"), Ok(1 << 40));
        assert!(parse_disk_size("0").is_err());
        assert!(parse_disk_size("0G").is_err());
        assert!(parse_disk_size("1.5G").is_err());
    }

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        flash: FlashArgs,
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

    #[test]
    fn flash_flags_round_trip_through_clap() {
        for write_cache in [false, true] {
            let params = FlashParams {
                channels: 3,
                read_latency_us: 150.5,
                write_latency_us: 20.0,
                read_mb_s: 250.0,
                write_mb_s: 80.0,
                write_cache,
                write_ack_us: 30.0,
                write_cache_kb: 512,
            };
            let args = std::iter::once("x".to_string()).chain(flash_flags(&params));
            assert_eq!(Cli::parse_from(args).flash.params(), params);
        }
        assert_eq!(
            Cli::parse_from(["x"]).flash.params(),
            FlashParams::default()
        );
    }
}
