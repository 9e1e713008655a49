//! Quantities as people write them: nanoseconds and byte counts printed in the largest unit
//! that keeps them short, and byte sizes read from command-line flags (`64M`, `2GiB`). Every
//! view and tool prints and parses these through here, so `report`, the recorder's lines, the
//! live view and the test bed agree on what `1.50 ms` or `1T` means; and dates on the UTC
//! calendar ([`utc`]). Pure string work.

/// Nanoseconds as ns/µs/ms/s with 3 significant digits: `850 ns`, `12.3 µs`, `1.50 ms`.
pub fn human_ns(ns: f64) -> String {
    let (v, unit, decimals) = scaled_ns(ns);
    let unit = if unit == "us" { "µs" } else { unit };
    format!("{v:.decimals$} {unit}")
}

/// [`human_ns`]'s number in at most 6 ASCII characters, for table cells: `850ns`, `12.3us`,
/// `1.50ms` (ASCII `us`, so that a cell's width is its length in bytes).
pub fn short_ns(ns: u64) -> String {
    let (v, unit, decimals) = scaled_ns(ns as f64);
    format!("{v:.decimals$}{unit}")
}

/// `ns` in its unit (`ns`, `us`, `ms` or `s`) and the decimals that leave 3 significant
/// digits (whole nanoseconds: none).
fn scaled_ns(ns: f64) -> (f64, &'static str, usize) {
    let (v, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "us")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    let decimals = if v >= 100.0 || unit == "ns" {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    (v, unit, decimals)
}

/// How [`human_bytes`] rounds, above whole bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BytesStyle {
    /// KiB and MiB with one decimal, GiB (the largest unit) with two: `report`'s columns,
    /// where a total of a few GiB keeps its tens of MiB.
    UpToGib,
    /// One decimal in every unit from KiB to TiB: a recording's running size, which can pass
    /// a TiB.
    UpToTib,
}

/// Bytes in binary units: `512 B`, `1.5 KiB`, then as `style` says.
pub fn human_bytes(bytes: f64, style: BytesStyle) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let top = match style {
        BytesStyle::UpToGib => 3,
        BytesStyle::UpToTib => 4,
    };
    let mut value = bytes;
    let mut unit = 0;
    while value >= 1024.0 && unit < top {
        value /= 1024.0;
        unit += 1;
    }
    let decimals = match (unit, style) {
        (0, _) => 0,
        (3, BytesStyle::UpToGib) => 2,
        _ => 1,
    };
    format!("{value:.decimals$} {}", UNITS[unit])
}

/// A byte count as flags take it: `4096`, `256K`, `64m`, `2G`, `1T` (binary multiples, either
/// case), optionally followed by `iB` or `B` (`64MiB`, `2GB`, `512B`). Zero is a size (a
/// wakeup threshold of 0 means every event); callers that need more say so.
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
        .map_err(|_| format!("{text:?}: not a size (examples: 4096, 256K, 64M, 1G)"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{text:?}: too large (sizes end below 16 EiB)"))
}

/// A wall-clock instant on the UTC calendar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UtcTime {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub nanos: u32,
}

/// `ns` since the Unix epoch on the proleptic Gregorian calendar (Howard Hinnant's
/// days-to-civil).
pub fn utc(ns: u64) -> UtcTime {
    let secs_total = ns / 1_000_000_000;
    let days = (secs_total / 86_400) as i64;
    let rem = (secs_total % 86_400) as u32;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    UtcTime {
        year: yoe + era * 400 + i64::from(month <= 2),
        month,
        day,
        hour: rem / 3600,
        minute: rem / 60 % 60,
        second: rem % 60,
        nanos: (ns % 1_000_000_000) as u32,
    }
}

impl UtcTime {
    /// ISO 8601 to the second: `2026-12-01T23:59:00Z`.
    pub fn iso8601(&self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_dates() {
        assert_eq!(super::utc(0).iso8601(), "1970-01-01T00:00:00Z");
        assert_eq!(
            super::utc(951_782_400_000_000_001).iso8601(),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(super::utc(951_782_400_000_000_001).nanos, 1);
    }

    use super::*;

    #[test]
    fn nanoseconds_keep_three_digits() {
        assert_eq!(human_ns(850.0), "850 ns");
        assert_eq!(human_ns(12_345.0), "12.3 µs");
        assert_eq!(human_ns(1_500_000.0), "1.50 ms");
        assert_eq!(human_ns(2_000_000_000.0), "2.00 s");
        assert_eq!(human_ns(250_000_000_000.0), "250 s");
        assert_eq!(short_ns(850), "850ns");
        assert_eq!(short_ns(12_345), "12.3us");
        assert_eq!(short_ns(1_500_000), "1.50ms");
        assert_eq!(short_ns(999_999_999), "1000ms");
    }

    #[test]
    fn bytes_in_binary_units() {
        use BytesStyle::*;
        for style in [UpToGib, UpToTib] {
            assert_eq!(human_bytes(512.0, style), "512 B");
            assert_eq!(human_bytes(1536.0, style), "1.5 KiB");
            assert_eq!(human_bytes(4096.0, style), "4.0 KiB");
            assert_eq!(human_bytes(3.0 * 1024.0 * 1024.0, style), "3.0 MiB");
        }
        assert_eq!(human_bytes((3u64 << 30) as f64, UpToGib), "3.00 GiB");
        assert_eq!(human_bytes((3u64 << 30) as f64, UpToTib), "3.0 GiB");
        assert_eq!(human_bytes((2u64 << 40) as f64, UpToGib), "2048.00 GiB");
        assert_eq!(human_bytes((2u64 << 40) as f64, UpToTib), "2.0 TiB");
        // Fractions of a byte (averages) round to whole bytes.
        assert_eq!(human_bytes(511.6, UpToGib), "512 B");
    }

    #[test]
    fn sizes_parse() {
        for (text, want) in [
            ("0", 0),
            ("4096", 4096),
            (" 4096 ", 4096),
            ("256K", 256 << 10),
            ("512k", 512 << 10),
            ("64m", 64 << 20),
            ("64M", 64 << 20),
            ("64MiB", 64 << 20),
            ("1G", 1 << 30),
            ("2GB", 2 << 30),
            ("2GiB", 2 << 30),
            ("1t", 1 << 40),
            ("1T", 1 << 40),
            ("512B", 512),
        ] {
            assert_eq!(parse_size(text), Ok(want), "{text}");
        }
        for bad in [
            "",
            "lots",
            "G",
            "-1",
            "1.5G",
            "3X",
            "2kib",
            "iB",
            "99999999999T",
        ] {
            assert!(parse_size(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(
            parse_size("3X"),
            Err("\"3X\": unknown unit 'X' (use K, M, G or T)".into())
        );
    }
}
