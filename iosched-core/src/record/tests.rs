//! Round trip, truncation, corruption and foreign-input tests of the recording format.

use std::io::{self, Read};

use proptest::prelude::*;

use super::{
    FormatError, RecordingReader, RecordingWriter, chunk_type,
    test_support::{Built, build_recording, chunks_of, sample_header},
};
use crate::event::Event;

/// Reads everything; panics on an I/O error (the inputs here are in memory).
fn read_all(bytes: &[u8]) -> Result<(RecordingReader<&[u8]>, Vec<Event>), FormatError> {
    let mut reader = RecordingReader::new(bytes)?;
    let mut events = Vec::new();
    while let Some(ev) = reader.next_event() {
        events.push(ev.expect("in-memory reads do not fail"));
    }
    Ok((reader, events))
}

fn has_warning(reader: &RecordingReader<&[u8]>, needle: &str) -> bool {
    reader.warnings().iter().any(|w| w.contains(needle))
}

#[test]
fn round_trip() {
    let Built {
        bytes,
        events,
        processes,
        footer,
        ..
    } = build_recording(40, 6);
    let (reader, read) = read_all(&bytes).unwrap();
    let mut expected_header = sample_header();
    expected_header.format_version = format!("{}.{}", super::FORMAT_MAJOR, super::FORMAT_MINOR);
    assert_eq!(reader.header(), &expected_header);
    assert_eq!(read, events);
    let by_pid: Vec<_> = reader.processes().values().cloned().collect();
    assert_eq!(by_pid, processes);
    assert_eq!(reader.footer(), Some(&footer));
    assert_eq!(reader.stats(), Some(&footer.stats));
    assert_eq!(footer.events_total, 40);
    assert_eq!(footer.events_per_kind["queue"], 2);
    // 4 overflowed the ring, 5 the kernel skipped (recursion misses): both lost.
    assert_eq!(footer.stats.ring_lost(), 4);
    assert_eq!(footer.stats.lost(), 9);
    assert!(reader.warnings().is_empty(), "{:?}", reader.warnings());
    assert_eq!(reader.events_missing(), 0);
    assert_eq!(reader.offset(), bytes.len() as u64);
}

/// NOTES chunks (format 1.1) carry scheduler messages; a reader that predates them skips
/// them (rule 8), which `future_additions_are_skipped` covers for any unknown type.
#[test]
fn notes_round_trip() {
    use crate::event::{Dev, Note};
    let notes: Vec<Note> = (0..5000u32)
        .map(|i| Note {
            ts_ns: 1_000 + u64::from(i),
            dev: Dev { major: 7, minor: 0 },
            cpu: (i % 2) as u16,
            pid: 42,
            text: format!("bfq{i}S expire (0, slow 0, num_disp 0, short_ttime 1)"),
        })
        .collect();
    let mut w = RecordingWriter::new(Vec::new(), &sample_header()).unwrap();
    for ev in crate::record::test_support::sample_events(10) {
        w.push(&ev).unwrap();
    }
    w.write_notes(&notes).unwrap();
    let footer = w.footer(Default::default(), 0, "test");
    let bytes = w.finish(&footer).unwrap();
    let (reader, events) = read_all(&bytes).unwrap();
    assert_eq!(events.len(), 10);
    assert_eq!(reader.notes(), &notes[..]);
    assert!(reader.warnings().is_empty(), "{:?}", reader.warnings());
    // Two chunks (4096 per chunk), each skippable on its own.
    let n = chunks_of(&bytes)
        .iter()
        .filter(|c| c.2 == chunk_type::NOTES)
        .count();
    assert_eq!(n, 2);
}

#[test]
fn empty_recording_and_default_chunking() {
    let w = RecordingWriter::new(Vec::new(), &sample_header()).unwrap();
    let footer = w.footer(Default::default(), 0, "duration");
    let bytes = w.finish(&footer).unwrap();
    let (reader, events) = read_all(&bytes).unwrap();
    assert!(events.is_empty());
    assert!(reader.warnings().is_empty());

    // Default chunk size: ~64 KiB of records per chunk.
    let mut w = RecordingWriter::new(Vec::new(), &sample_header()).unwrap();
    let evs = super::test_support::sample_events(2000);
    for ev in &evs {
        w.push(ev).unwrap();
    }
    let bytes = w.finish(&Default::default()).unwrap();
    let chunks = chunks_of(&bytes);
    let events_chunks: Vec<_> = chunks
        .iter()
        .filter(|c| c.2 == chunk_type::EVENTS)
        .collect();
    assert_eq!(events_chunks.len(), 4);
    assert!(events_chunks[0].1 - events_chunks[0].0 <= 64 << 10);
    let (reader, read) = read_all(&bytes).unwrap();
    assert_eq!(read, evs);
    // The footer given says 0 events: the reader notices.
    assert!(has_warning(&reader, "footer counts 0 events but 2000"));
}

#[test]
fn truncation_at_every_byte_keeps_every_complete_chunk() {
    let built = build_recording(30, 4);
    let bytes = &built.bytes;
    let chunks = chunks_of(bytes);
    assert!(chunks.iter().filter(|c| c.2 == chunk_type::EVENTS).count() >= 5);
    let header_end = chunks[0].1;
    for cut in 0..=bytes.len() {
        let result = read_all(&bytes[..cut]);
        if cut == 0 {
            assert!(matches!(result, Err(FormatError::Empty)), "cut {cut}");
            continue;
        }
        if cut < header_end {
            assert!(
                matches!(result, Err(FormatError::TruncatedHeader { len }) if len == cut as u64),
                "cut {cut}: {:?}",
                result.err()
            );
            continue;
        }
        let (reader, events) = result.unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        let expected = built
            .checkpoints
            .iter()
            .filter(|(b, _)| *b <= cut as u64)
            .map(|(_, n)| *n)
            .max()
            .unwrap() as usize;
        assert_eq!(events, built.events[..expected], "cut {cut}");
        let last_boundary = chunks
            .iter()
            .map(|c| c.1)
            .filter(|&e| e <= cut)
            .max()
            .unwrap();
        let partial = cut - last_boundary;
        if partial > 0 {
            assert!(
                has_warning(
                    &reader,
                    &format!("truncated: {partial} bytes after the last complete chunk")
                ),
                "cut {cut}: {:?}",
                reader.warnings()
            );
        } else {
            assert!(!has_warning(&reader, "truncated"), "cut {cut}");
        }
        if cut == bytes.len() {
            assert!(reader.warnings().is_empty());
            assert!(reader.footer().is_some());
        } else {
            assert!(reader.footer().is_none());
            assert!(
                has_warning(&reader, "recording was not closed cleanly"),
                "cut {cut}"
            );
        }
        // Processes written before the cut are all there.
        let procs_expected = chunks
            .iter()
            .filter(|c| c.2 == chunk_type::PROCESSES && c.1 <= cut)
            .count();
        assert!(reader.processes().len() >= procs_expected, "cut {cut}");
    }
}

#[test]
fn every_flipped_byte_is_detected_and_only_its_chunk_is_lost() {
    let built = build_recording(24, 4);
    let chunks = chunks_of(&built.bytes);
    // Events by chunk, in order, to know what each chunk held.
    let mut events_before = Vec::new();
    let mut n = 0usize;
    for c in &chunks {
        events_before.push(n);
        if c.2 == chunk_type::EVENTS {
            let p = &built.bytes[c.0 + 16..];
            n += u32::from_le_bytes(p[8..12].try_into().unwrap()) as usize;
        }
    }
    for (ci, &(start, end, typ)) in chunks.iter().enumerate().skip(1) {
        let lost = if typ == chunk_type::EVENTS {
            events_before[ci]..events_before.get(ci + 1).copied().unwrap_or(n)
        } else {
            0..0
        };
        let expected: Vec<Event> = built
            .events
            .iter()
            .enumerate()
            .filter(|(i, _)| !lost.contains(i))
            .map(|(_, e)| *e)
            .collect();
        for at in start..end {
            // Every bit position over the chunk, and whole bytes in its header.
            let whole = if at < start + super::CHUNK_HEADER_LEN {
                Some(0xff)
            } else {
                None
            };
            for flip in std::iter::once(1u8 << (at % 8)).chain(whole) {
                let mut bytes = built.bytes.clone();
                bytes[at] ^= flip;
                let (reader, events) = read_all(&bytes).unwrap();
                assert_eq!(
                    events, expected,
                    "chunk {ci} (type {typ}) byte {at} ^ {flip:#x}"
                );
                assert!(
                    !reader.warnings().is_empty(),
                    "chunk {ci} byte {at}: damage not reported"
                );
                if typ == chunk_type::EVENTS && ci + 2 < chunks.len() {
                    assert!(
                        has_warning(&reader, "corrupt chunk at offset"),
                        "{:?}",
                        reader.warnings()
                    );
                    assert_eq!(reader.events_missing(), lost.len() as u64);
                }
                if typ == chunk_type::FOOTER {
                    assert!(reader.footer().is_none());
                }
            }
        }
    }
}

#[test]
fn corrupt_header_is_an_error() {
    let built = build_recording(4, 4);
    let header_chunk = chunks_of(&built.bytes)[0];
    for at in header_chunk.0..header_chunk.1 {
        let mut bytes = built.bytes.clone();
        bytes[at] ^= 0x10;
        match RecordingReader::new(&bytes[..]) {
            Err(FormatError::CorruptHeader { .. }) => {}
            other => panic!("byte {at}: {:?}", other.err()),
        }
    }
}

#[test]
fn foreign_and_empty_inputs_are_named() {
    let err = |bytes: &[u8]| {
        RecordingReader::new(bytes)
            .err()
            .expect("must fail")
            .to_string()
    };
    assert!(matches!(
        RecordingReader::new(&b""[..]),
        Err(FormatError::Empty)
    ));
    assert!(err(b"").starts_with("empty file"));

    let mut blktrace = vec![0x07, 0x74, 0x61, 0x65, 1, 0, 0, 0];
    blktrace.resize(48, 0);
    let e = err(&blktrace);
    assert!(
        e.contains("not an iosched-trace recording") && e.contains("blktrace"),
        "{e}"
    );

    let e = err(b"  8,0    0        1     0.000000000  4242  Q  WS 2048 + 8 [dd]\n");
    assert!(e.contains("text file"), "{e}");

    // Pseudo-random bytes (fixed seed).
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let random: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    let e = err(&random);
    assert!(e.contains("unknown data (first bytes"), "{e}");

    // Our magic with another major version.
    let mut v2 = built_prefix();
    v2[8] = 2;
    assert!(matches!(
        RecordingReader::new(&v2[..]),
        Err(FormatError::UnsupportedVersion {
            major: 2,
            minor: super::FORMAT_MINOR
        })
    ));
    assert!(err(&v2).contains("use a newer iosched-trace"));

    // A newer minor version reads fine.
    let mut v1_9 = build_recording(3, 2).bytes;
    v1_9[10] = 9;
    let (reader, events) = read_all(&v1_9).unwrap();
    assert_eq!(reader.version(), (1, 9));
    assert_eq!(events.len(), 3);
}

fn built_prefix() -> Vec<u8> {
    build_recording(2, 2).bytes
}

#[test]
fn open_names_the_path() {
    let path = std::path::Path::new("/nonexistent/dir/rec.iost");
    let e = RecordingReader::open(path).err().unwrap().to_string();
    assert!(e.starts_with("/nonexistent/dir/rec.iost: "), "{e}");
}

#[test]
fn future_additions_are_skipped() {
    // An unknown chunk type and longer event records (a future minor version) read fine.
    let built = build_recording(8, 4);
    let chunks = chunks_of(&built.bytes);
    let mut out = built.bytes[..chunks[1].0].to_vec();
    let unknown = b"something new";
    out.extend_from_slice(&super::codec::chunk_header(99, &[unknown]));
    out.extend_from_slice(unknown);
    // Re-encode the events with 8 extra bytes per record.
    for &(start, end, typ) in &chunks[1..] {
        if typ != chunk_type::EVENTS {
            out.extend_from_slice(&built.bytes[start..end]);
            continue;
        }
        let p = &built.bytes[start + 16..end];
        let count = u32::from_le_bytes(p[8..12].try_into().unwrap()) as usize;
        let mut payload = p[..16].to_vec();
        payload[12..16].copy_from_slice(&112u32.to_le_bytes());
        for rec in p[16..].chunks(104).take(count) {
            payload.extend_from_slice(rec);
            payload.extend_from_slice(&[0xAA; 8]);
        }
        out.extend_from_slice(&super::codec::chunk_header(typ, &[&payload]));
        out.extend_from_slice(&payload);
    }
    let (reader, events) = read_all(&out).unwrap();
    assert_eq!(events, built.events);
    assert!(has_warning(
        &reader,
        "1 chunks of types this build does not know"
    ));
}

#[test]
fn garbage_between_chunks_is_skipped_and_reported() {
    let built = build_recording(12, 4);
    let chunks = chunks_of(&built.bytes);
    let cut = chunks[2].0;
    let mut bytes = built.bytes[..cut].to_vec();
    bytes.extend_from_slice(&[0x55; 37]);
    bytes.extend_from_slice(&super::CHUNK_MAGIC);
    bytes.extend_from_slice(&built.bytes[cut..]);
    let (reader, events) = read_all(&bytes).unwrap();
    assert_eq!(events, built.events);
    assert!(
        has_warning(
            &reader,
            &format!("corrupt chunk at offset {cut} (no chunk starts there): skipped 41 bytes")
        ),
        "{:?}",
        reader.warnings()
    );
}

#[test]
fn io_errors_end_the_stream_with_an_error() {
    struct Failing<'a>(&'a [u8]);
    impl Read for Failing<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Err(io::Error::other("device went away"));
            }
            let n = buf.len().min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    // Larger than one read, so the header is read before the failure.
    let built = build_recording(2000, 100);
    let mut reader = RecordingReader::new(Failing(&built.bytes)).unwrap();
    let results: Vec<_> = reader.by_ref().collect();
    assert!(results.len() > 100);
    assert!(results[..results.len() - 1].iter().all(Result::is_ok));
    let err = results.last().unwrap().as_ref().unwrap_err();
    assert!(err.to_string().contains("device went away"));
    assert!(reader.next_event().is_none());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = read_all(&bytes);
        // Also behind a valid file header.
        let mut prefixed = build_recording(0, 1).bytes[..16].to_vec();
        prefixed.extend_from_slice(&bytes);
        let _ = read_all(&prefixed);
    }

    #[test]
    fn mutations_never_panic_nor_invent_events(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..4), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let built = build_recording(20, 3);
        let mut bytes = built.bytes.clone();
        for (at, value, op) in edits {
            let i = at.index(bytes.len());
            match op {
                0 => bytes[i] = value,
                1 => bytes.insert(i, value),
                2 => { bytes.remove(i); }
                _ => bytes[i] ^= 1 << (value % 8),
            }
        }
        let keep = bytes.len() - cut.index(bytes.len() / 4 + 1);
        bytes.truncate(keep);
        if let Ok((_, events)) = read_all(&bytes) {
            for ev in &events {
                prop_assert!(built.events.contains(ev), "invented event {ev:?}");
            }
        }
    }
}

/// Format 1.3's queue attributes: written and read back; a 1.2 header without them reads
/// them as absent.
#[test]
fn queue_attributes_round_trip_and_default_in_older_headers() {
    let mut header = sample_header();
    header.devices[0].nomerges = Some(2);
    header.devices[0].max_sectors_kb = Some(512);
    let json = serde_json::to_string(&header).unwrap();
    assert!(json.contains(r#""nomerges":2"#), "{json}");
    let back: super::Header = serde_json::from_str(&json).unwrap();
    assert_eq!(back, header);

    let old = r#"{"format_version":"1.2","devices":[{"name":"sda","dev":{"major":8,"minor":0},
        "nr_requests":64,"scheduler":"bfq","request_based":true}]}"#;
    let old: super::Header = serde_json::from_str(old).unwrap();
    assert_eq!(old.devices[0].nr_requests, Some(64));
    assert_eq!(old.devices[0].nomerges, None);
    assert_eq!(old.devices[0].max_sectors_kb, None);
}

#[test]
fn kernel_skips_count_as_lost_and_are_unknown_in_older_stats() {
    let old: super::Stats =
        serde_json::from_str(r#"{"lost_per_cpu":[0,3],"read_errors":0,"sent":10}"#).unwrap();
    assert_eq!(old.kernel_skipped, None);
    assert_eq!(old.lost(), 3);
    let new: super::Stats = serde_json::from_str(
        r#"{"lost_per_cpu":[0,3],"read_errors":0,"sent":10,"kernel_skipped":2}"#,
    )
    .unwrap();
    assert_eq!((new.ring_lost(), new.lost()), (3, 5));
}

fn cpu_sample(i: u64) -> super::CpuSample {
    super::CpuSample {
        ts_ns: 1_000_000_000 * (i + 1),
        busy_ns: 700_000_000 * i,
        idle_ns: 1_300_000_000 * i,
        recorder_ns: 20_000_000 * i,
        online_cpus: 2,
    }
}

/// A recording with a CPU chunk at the start, between events and at the end, as the
/// recorder writes them (format 1.5).
fn recording_with_cpu_chunks() -> (Vec<u8>, Vec<Event>, Vec<super::CpuSample>) {
    let samples: Vec<_> = (0..3).map(cpu_sample).collect();
    let events = super::test_support::sample_events(12);
    let mut header = sample_header();
    header.online_cpus = Some(2);
    header.host_profile = Some(super::HostProfile::defaults());
    let mut w = RecordingWriter::new(Vec::new(), &header)
        .unwrap()
        .with_chunk_events(4);
    w.write_cpu(&samples[0]).unwrap();
    for ev in &events[..6] {
        w.push(ev).unwrap();
    }
    w.write_stats(&super::test_support::sample_stats(6))
        .unwrap();
    w.write_cpu(&samples[1]).unwrap();
    for ev in &events[6..] {
        w.push(ev).unwrap();
    }
    w.write_cpu(&samples[2]).unwrap();
    let footer = w.footer(super::test_support::sample_stats(12), 0, "duration");
    (w.finish(&footer).unwrap(), events, samples)
}

#[test]
fn cpu_chunks_round_trip_with_the_header_fields() {
    let (bytes, events, samples) = recording_with_cpu_chunks();
    let (reader, read) = read_all(&bytes).unwrap();
    assert_eq!(read, events);
    assert_eq!(reader.cpu_samples(), &samples[..]);
    assert_eq!(reader.header().online_cpus, Some(2));
    assert_eq!(
        reader.header().host_profile.as_ref(),
        Some(&super::HostProfile::defaults())
    );
    assert_eq!(
        reader.header().format_version,
        format!("{}.{}", super::FORMAT_MAJOR, super::FORMAT_MINOR)
    );
    assert!(reader.warnings().is_empty(), "{:?}", reader.warnings());
    let cpu_chunks = chunks_of(&bytes)
        .iter()
        .filter(|c| c.2 == chunk_type::CPU)
        .count();
    assert_eq!(cpu_chunks, 3);
    // Through the source interface too.
    let source = crate::source::RecordingSource::new(
        std::path::Path::new("x"),
        RecordingReader::new(&bytes[..]).unwrap(),
    );
    let mut source = source;
    use crate::source::TraceSource;
    while source.next_event().is_some() {}
    assert_eq!(source.cpu_samples(), &samples[..]);
}

/// A 1.4 file (no CPU chunks, no new header fields) reads, with no samples.
#[test]
fn a_version_1_4_recording_still_reads_without_cpu_samples() {
    let built = build_recording(10, 4);
    let mut bytes = built.bytes.clone();
    bytes[10..12].copy_from_slice(&4u16.to_le_bytes());
    // Its header as 1.4 wrote it: re-encode the HEADER chunk without the 1.5 fields.
    let chunks = chunks_of(&bytes);
    let (start, end, typ) = chunks[0];
    assert_eq!(typ, chunk_type::HEADER);
    let mut json: serde_json::Value =
        serde_json::from_slice(&bytes[start + super::CHUNK_HEADER_LEN..end]).unwrap();
    json["format_version"] = "1.4".into();
    assert!(json.get("online_cpus").is_none() && json.get("host_profile").is_none());
    let payload = serde_json::to_vec(&json).unwrap();
    let mut old = bytes[..start].to_vec();
    old.extend_from_slice(&super::codec::chunk_header(chunk_type::HEADER, &[&payload]));
    old.extend_from_slice(&payload);
    old.extend_from_slice(&bytes[end..]);
    let (reader, events) = read_all(&old).unwrap();
    assert_eq!(events, built.events);
    assert_eq!(reader.version(), (1, 4));
    assert!(reader.cpu_samples().is_empty());
    assert_eq!(reader.header().online_cpus, None);
    assert!(reader.header().host_profile.is_none());
    assert!(reader.warnings().is_empty(), "{:?}", reader.warnings());
}

/// A file cut anywhere keeps every CPU chunk that is complete; a corrupt one is skipped with
/// a warning and the others are kept.
#[test]
fn truncation_keeps_complete_cpu_chunks_and_a_corrupt_one_is_skipped() {
    let (bytes, _, samples) = recording_with_cpu_chunks();
    let chunks = chunks_of(&bytes);
    let cpu_ends: Vec<usize> = chunks
        .iter()
        .filter(|c| c.2 == chunk_type::CPU)
        .map(|c| c.1)
        .collect();
    let first_chunk = chunks[1].0;
    for cut in first_chunk..bytes.len() {
        let (reader, _) = read_all(&bytes[..cut]).unwrap();
        let complete = cpu_ends.iter().filter(|&&end| end <= cut).count();
        assert_eq!(reader.cpu_samples(), &samples[..complete], "cut at {cut}");
    }
    // The middle sample's JSON replaced by a valid chunk holding garbage JSON.
    let middle = chunks
        .iter()
        .filter(|c| c.2 == chunk_type::CPU)
        .nth(1)
        .unwrap();
    let mut damaged = bytes[..middle.0].to_vec();
    let junk = b"{\"ts_ns\":\"not a number\"}";
    damaged.extend_from_slice(&super::codec::chunk_header(chunk_type::CPU, &[junk]));
    damaged.extend_from_slice(junk);
    damaged.extend_from_slice(&bytes[middle.1..]);
    let (reader, _) = read_all(&damaged).unwrap();
    assert_eq!(reader.cpu_samples(), &[samples[0], samples[2]]);
    assert!(has_warning(&reader, "CPU chunk at offset"));
}
