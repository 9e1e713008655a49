//! Byte layouts: file header, chunk header, event records (docs/FORMAT.md). Pure functions.

use crate::event::{Comm, Dev, Event, EventKind, Op, ReqFlags};

/// First 8 bytes of every recording. The high first byte and the `\n` catch 7-bit and
/// newline-translating transfers, as PNG's signature does.
pub const FILE_MAGIC: [u8; 8] = *b"\x89IOSCHD\n";
/// Incompatible layout changes bump the major version; readers refuse other majors.
pub const FORMAT_MAJOR: u16 = 1;
/// Compatible additions (new chunk types, fields appended to event records, new JSON fields)
/// bump the minor version; readers accept any minor of their major.
pub const FORMAT_MINOR: u16 = 6;
/// magic (8) + major (u16) + minor (u16) + reserved (u32, 0).
pub const FILE_HEADER_LEN: usize = 16;

/// Starts every chunk. Not ASCII and no NUL, so it rarely appears in JSON or small integers.
pub const CHUNK_MAGIC: [u8; 4] = [0xE8, 0x1C, 0xB7, 0x9A];
/// magic (4) + type (u32) + payload length (u32) + crc32 of type, length and payload (u32).
pub const CHUNK_HEADER_LEN: usize = 16;
/// Larger declared lengths are corruption, never data: readers never buffer more.
pub const MAX_CHUNK_PAYLOAD: u32 = 16 << 20;

/// Chunk type codes.
pub mod chunk_type {
    pub const HEADER: u32 = 1;
    pub const EVENTS: u32 = 2;
    pub const PROCESSES: u32 = 3;
    pub const STATS: u32 = 4;
    pub const FOOTER: u32 = 5;
    /// Scheduler messages (`Note`s), JSON; since 1.1.
    pub const NOTES: u32 = 6;
    /// One `CpuSample` (the machine's and the recorder's CPU time), JSON; since 1.5.
    pub const CPU: u32 = 7;
}

/// One event record, format 1.0 (layout in docs/FORMAT.md).
pub const EVENT_RECORD_SIZE: u32 = 104;
/// EVENTS payload prefix: first event index (u64), record count (u32), record size (u32).
pub const EVENTS_PREFIX_LEN: usize = 16;

pub fn file_header() -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    h[..8].copy_from_slice(&FILE_MAGIC);
    h[8..10].copy_from_slice(&FORMAT_MAJOR.to_le_bytes());
    h[10..12].copy_from_slice(&FORMAT_MINOR.to_le_bytes());
    h
}

/// CRC-32 (IEEE) of the type, the length and the payload given as consecutive `parts`.
pub fn chunk_crc(typ: u32, parts: &[&[u8]]) -> u32 {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&typ.to_le_bytes());
    hasher.update(&(len as u32).to_le_bytes());
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize()
}

/// The 16-byte header of a chunk whose payload is `parts` concatenated (at most
/// [`MAX_CHUNK_PAYLOAD`] bytes).
pub fn chunk_header(typ: u32, parts: &[&[u8]]) -> [u8; CHUNK_HEADER_LEN] {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut h = [0u8; CHUNK_HEADER_LEN];
    h[..4].copy_from_slice(&CHUNK_MAGIC);
    h[4..8].copy_from_slice(&typ.to_le_bytes());
    h[8..12].copy_from_slice(&(len as u32).to_le_bytes());
    h[12..16].copy_from_slice(&chunk_crc(typ, parts).to_le_bytes());
    h
}

/// A chunk header's fields, unchecked.
#[derive(Clone, Copy, Debug)]
pub struct ChunkHeader {
    pub magic_ok: bool,
    pub typ: u32,
    pub len: u32,
    pub crc: u32,
}

pub fn parse_chunk_header(b: &[u8; CHUNK_HEADER_LEN]) -> ChunkHeader {
    ChunkHeader {
        magic_ok: b[..4] == CHUNK_MAGIC,
        typ: u32_at(b, 4),
        len: u32_at(b, 8),
        crc: u32_at(b, 12),
    }
}

pub fn events_prefix(first_index: u64, count: u32) -> [u8; EVENTS_PREFIX_LEN] {
    let mut p = [0u8; EVENTS_PREFIX_LEN];
    p[..8].copy_from_slice(&first_index.to_le_bytes());
    p[8..12].copy_from_slice(&count.to_le_bytes());
    p[12..16].copy_from_slice(&EVENT_RECORD_SIZE.to_le_bytes());
    p
}

/// Appends `ev` as one [`EVENT_RECORD_SIZE`]-byte record. Built in a fixed array and appended
/// once: the recorder encodes about a million events a second, and one bounds-checked append
/// per field cost as much as the rest of its per-event work.
pub fn encode_event(ev: &Event, out: &mut Vec<u8>) {
    let mut rec = [0u8; EVENT_RECORD_SIZE as usize];
    let mut put = |at: usize, bytes: &[u8]| rec[at..at + bytes.len()].copy_from_slice(bytes);
    put(0, &ev.ts_ns.to_le_bytes());
    put(8, &ev.sector.to_le_bytes());
    put(16, &ev.rq.to_le_bytes());
    put(24, &ev.bio.to_le_bytes());
    put(32, &ev.cgroup_id.to_le_bytes());
    put(40, &ev.aux.to_le_bytes());
    put(48, &ev.pid.to_le_bytes());
    put(52, &ev.tgid.to_le_bytes());
    put(56, &ev.dev.major.to_le_bytes());
    put(60, &ev.dev.minor.to_le_bytes());
    put(64, &ev.bytes.to_le_bytes());
    put(68, &ev.flags.0.to_le_bytes());
    put(72, &ev.error.to_le_bytes());
    put(76, &ev.kind.code().to_le_bytes());
    put(78, &ev.cpu.to_le_bytes());
    put(80, &ev.ioprio.to_le_bytes());
    put(82, &[ev.op.code(), 0]); // 83 reserved
    put(84, &ev.comm.0);
    // 100..104 reserved
    out.extend_from_slice(&rec);
}

/// Decodes the first [`EVENT_RECORD_SIZE`] bytes of `rec` (longer records come from newer
/// minor versions: their extra bytes are ignored). `Err(code)` for a kind this build does not
/// know.
#[inline]
pub fn decode_event(rec: &[u8]) -> Result<Event, u16> {
    // One length check up front: every field below then reads at a constant offset of a
    // fixed-size array, with no bounds check of its own (this runs for every event read).
    let rec: &[u8; EVENT_RECORD_SIZE as usize] = rec
        .first_chunk()
        .expect("a record is at least EVENT_RECORD_SIZE bytes");
    let u16_at = |at: usize| u16::from_le_bytes([rec[at], rec[at + 1]]);
    let u32_at = |at: usize| u32::from_le_bytes([rec[at], rec[at + 1], rec[at + 2], rec[at + 3]]);
    let u64_at = |at: usize| u64::from_le_bytes(rec[at..at + 8].try_into().expect("8 bytes"));
    let code = u16_at(76);
    let kind = EventKind::from_code(code).ok_or(code)?;
    let mut comm = Comm::default();
    comm.0.copy_from_slice(&rec[84..100]);
    Ok(Event {
        ts_ns: u64_at(0),
        sector: u64_at(8),
        rq: u64_at(16),
        bio: u64_at(24),
        cgroup_id: u64_at(32),
        aux: u64_at(40),
        pid: u32_at(48),
        tgid: u32_at(52),
        dev: Dev {
            major: u32_at(56),
            minor: u32_at(60),
        },
        bytes: u32_at(64),
        flags: ReqFlags(u32_at(68)),
        error: u32_at(72) as i32,
        kind,
        cpu: u16_at(78),
        ioprio: u16_at(80),
        op: Op::from_code(rec[82]),
        comm,
    })
}

pub fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

pub fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// A one-line guess at what a file that is not a recording is, from its first bytes.
pub fn sniff(head: &[u8]) -> String {
    let starts = |magic: &[u8]| head.starts_with(magic);
    if head.len() >= 4 {
        let le = u32_at(head, 0);
        let be = u32::from_be_bytes(head[..4].try_into().expect("4 bytes"));
        for (word, endian) in [(le, ""), (be, ", foreign-endian")] {
            if word & 0xffff_ff00 == 0x6561_7400 {
                return format!(
                    "this looks like a blktrace file (version {}{endian}); read it with \
                     blkparse or convert it",
                    word & 0xff
                );
            }
        }
    }
    let known: [(&[u8], &str); 8] = [
        (b"\x1f\x8b", "gzip-compressed data: decompress it first"),
        (
            b"\x28\xb5\x2f\xfd",
            "zstd-compressed data: decompress it first",
        ),
        (b"\xfd7zXZ\x00", "xz-compressed data: decompress it first"),
        (b"BZh", "bzip2-compressed data: decompress it first"),
        (b"\x7fELF", "an ELF executable or object"),
        (b"PERFILE2", "a perf.data file (perf record)"),
        (b"\x89PNG", "a PNG image"),
        (b"PK\x03\x04", "a zip archive"),
    ];
    for (magic, what) in known {
        if starts(magic) {
            return format!("this looks like {what}");
        }
    }
    let text = match std::str::from_utf8(head) {
        Ok(s) => Some(s),
        // A multi-byte character cut at the end of the sample is still text.
        Err(e) if e.error_len().is_none() => std::str::from_utf8(&head[..e.valid_up_to()]).ok(),
        Err(_) => None,
    };
    if let Some(text) = text
        && !text.is_empty()
        && text
            .chars()
            .all(|c| !c.is_control() || matches!(c, '\n' | '\r' | '\t'))
    {
        let line = text.lines().next().unwrap_or("").trim();
        let shown: String = line.chars().take(40).collect();
        return format!("this looks like a text file (it starts with {shown:?})");
    }
    let shown: Vec<String> = head.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("unknown data (first bytes {})", shown.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::test_support::sample_events;

    #[test]
    fn event_records_round_trip_every_field() {
        for ev in sample_events(50) {
            let mut buf = Vec::new();
            encode_event(&ev, &mut buf);
            assert_eq!(buf.len(), EVENT_RECORD_SIZE as usize);
            assert_eq!(decode_event(&buf), Ok(ev));
        }
    }

    #[test]
    fn wakeups_keep_their_code_and_wakee_at_fixed_offsets() {
        let mut ev = sample_events(1)[0];
        ev.kind = EventKind::Wakeup;
        ev.aux = 4242 | (4240u64 << 32);
        let mut buf = Vec::new();
        encode_event(&ev, &mut buf);
        // Readers that predate the kind skip it by its code (docs/FORMAT.md).
        assert_eq!(u16_at(&buf, 76), iosched_trace_common::kind::WAKEUP);
        assert_eq!((u32_at(&buf, 40), u32_at(&buf, 44)), (4242, 4240));
        let back = decode_event(&buf).unwrap();
        assert_eq!(back.wakee(), Some((4242, 4240)));
        assert_eq!(back, ev);
    }

    #[test]
    fn unknown_kinds_are_reported_not_guessed() {
        let mut buf = Vec::new();
        encode_event(&sample_events(1)[0], &mut buf);
        buf[76..78].copy_from_slice(&999u16.to_le_bytes());
        assert_eq!(decode_event(&buf), Err(999));
    }

    #[test]
    fn sniff_names_common_foreign_files() {
        assert!(sniff(&[0x07, 0x74, 0x61, 0x65, 1, 0, 0, 0]).contains("blktrace file (version 7"));
        assert!(sniff(&[0x65, 0x61, 0x74, 0x07]).contains("foreign-endian"));
        assert!(sniff(b"\x1f\x8b\x08\x00").contains("gzip"));
        assert!(sniff(b"hello world\n").contains("text file"));
        assert!(
            sniff(&[0x00, 0x01, 0xfe, 0x80]).contains("unknown data (first bytes 00 01 fe 80)")
        );
    }
}
