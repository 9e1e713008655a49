//! A recording read while it is written, appended in pieces: cut mid-chunk, at chunk
//! boundaries, byte by byte, the footer last. The contents are known by construction (the
//! writer's own chunks), and what is read in pieces must be what the finished file gives.

use std::{
    cell::RefCell,
    fs::{self, File, OpenOptions},
    io::{self, Read, Write},
    path::{Path, PathBuf},
    rc::Rc,
};

use proptest::prelude::*;

use super::*;
use crate::{
    event::Event,
    record::{
        CHUNK_HEADER_LEN, RecordingWriter, chunk_type,
        test_support::{build_recording, chunks_of, event_at, sample_header, sample_stats},
    },
    source::TraceSource,
};

/// An in-memory input that grows: `WouldBlock` where its data ends until [`Growing::end`],
/// and reads of at most `max_read` bytes (short reads, as a file being written gives).
#[derive(Clone)]
struct Growing(Rc<RefCell<GrowState>>);

struct GrowState {
    data: Vec<u8>,
    pos: usize,
    ended: bool,
    max_read: usize,
}

impl Growing {
    fn new(max_read: usize) -> Growing {
        Growing(Rc::new(RefCell::new(GrowState {
            data: Vec::new(),
            pos: 0,
            ended: false,
            max_read: max_read.max(1),
        })))
    }

    fn append(&self, bytes: &[u8]) {
        self.0.borrow_mut().data.extend_from_slice(bytes);
    }

    fn end(&self) {
        self.0.borrow_mut().ended = true;
    }

    fn rewind(&self) {
        self.0.borrow_mut().pos = 0;
    }
}

impl Read for Growing {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut s = self.0.borrow_mut();
        let avail = s.data.len() - s.pos;
        if avail == 0 {
            return if s.ended {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        }
        let n = avail.min(buf.len()).min(s.max_read);
        let at = s.pos;
        buf[..n].copy_from_slice(&s.data[at..at + n]);
        s.pos += n;
        Ok(n)
    }
}

/// Events of the EVENTS chunks that end at or before `len`: what a reader of the first `len`
/// bytes must have decoded, computed from the chunk layout alone (not by the reader).
fn events_in_whole_chunks(bytes: &[u8], len: usize) -> usize {
    chunks_of(bytes)
        .iter()
        .filter(|&&(_, end, typ)| typ == chunk_type::EVENTS && end <= len)
        .map(|&(start, _, _)| {
            let at = start + CHUNK_HEADER_LEN + 8;
            u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize
        })
        .sum()
}

/// What reading gave: events in arrival order, and the reader at its end.
struct Read_ {
    events: Vec<Event>,
    reader: RecordingReader<Growing>,
}

/// Reads until the input has nothing more (or ends); panics on a real error.
fn drain(reader: &mut RecordingReader<Growing>, events: &mut Vec<Event>) -> bool {
    loop {
        match reader.next_event() {
            Some(Ok(ev)) => events.push(ev),
            Some(Err(e)) if e.is_waiting() => return false,
            Some(Err(e)) => panic!("read error: {e}"),
            None => return true,
        }
    }
}

/// Feeds `bytes` up to each of `cuts` in turn (then all of it), reading after each piece as
/// a follower does, and checks after each that exactly the events of whole chunks were
/// decoded; then ends the input.
fn read_in_pieces(bytes: &[u8], cuts: &[usize], max_read: usize, check: bool) -> Read_ {
    let input = Growing::new(max_read);
    let mut reader = None;
    let mut events = Vec::new();
    let mut fed = 0;
    for &cut in cuts.iter().chain([&bytes.len()]) {
        let cut = cut.clamp(fed, bytes.len());
        input.append(&bytes[fed..cut]);
        fed = cut;
        if reader.is_none() {
            match RecordingReader::new(input.clone()) {
                Ok(r) => reader = Some(r),
                Err(e) if e.is_waiting() => {
                    // The header is not whole yet: start over from the first byte next time.
                    input.rewind();
                    continue;
                }
                Err(e) => panic!("{e}"),
            }
        }
        let r = reader.as_mut().unwrap();
        assert!(!drain(r, &mut events), "ended before the input did");
        if check {
            assert_eq!(
                events.len(),
                events_in_whole_chunks(bytes, fed),
                "after {fed} of {} bytes",
                bytes.len()
            );
        }
    }
    input.end();
    let mut reader = reader.expect("the header was fed");
    assert!(drain(&mut reader, &mut events));
    Read_ { events, reader }
}

/// The whole recording read at once, for comparison.
fn read_whole(bytes: &[u8]) -> (Vec<Event>, RecordingReader<&[u8]>) {
    let mut reader = RecordingReader::new(bytes).unwrap();
    let events = reader.by_ref().map(|e| e.unwrap()).collect();
    (events, reader)
}

fn assert_same_as_whole(got: &Read_, bytes: &[u8]) {
    let (events, whole) = read_whole(bytes);
    assert_eq!(got.events, events);
    assert_eq!(got.reader.warnings(), whole.warnings());
    assert_eq!(got.reader.events_missing(), whole.events_missing());
    assert_eq!(got.reader.footer(), whole.footer());
    assert_eq!(got.reader.stats(), whole.stats());
    assert_eq!(got.reader.processes(), whole.processes());
    assert_eq!(got.reader.offset(), bytes.len() as u64);
}

#[test]
fn chunk_by_chunk_then_the_footer() {
    let built = build_recording(60, 7);
    let bytes = &built.bytes;
    let bounds: Vec<usize> = chunks_of(bytes).iter().map(|c| c.1).collect();
    let got = read_in_pieces(bytes, &bounds, usize::MAX, true);
    assert_eq!(got.events, built.events);
    assert_eq!(got.reader.footer(), Some(&built.footer));
    assert!(
        got.reader.warnings().is_empty(),
        "{:?}",
        got.reader.warnings()
    );
    assert_same_as_whole(&got, bytes);
}

#[test]
fn cut_in_the_middle_of_every_chunk() {
    let built = build_recording(60, 7);
    let bytes = &built.bytes;
    // Two cuts inside each chunk: in its 16-byte header and in its payload.
    let cuts: Vec<usize> = chunks_of(bytes)
        .iter()
        .flat_map(|&(start, end, _)| [start + 5, (start + CHUNK_HEADER_LEN + end) / 2])
        .collect();
    for max_read in [usize::MAX, 7, 1] {
        let got = read_in_pieces(bytes, &cuts, max_read, true);
        assert_eq!(got.events, built.events);
        assert!(
            got.reader.warnings().is_empty(),
            "{:?}",
            got.reader.warnings()
        );
        assert_same_as_whole(&got, bytes);
    }
}

#[test]
fn byte_by_byte() {
    let built = build_recording(12, 5);
    let bytes = &built.bytes;
    let cuts: Vec<usize> = (1..bytes.len()).collect();
    let got = read_in_pieces(bytes, &cuts, usize::MAX, true);
    assert_eq!(got.events, built.events);
    assert_same_as_whole(&got, bytes);
}

/// The footer is the last chunk: until it arrives the reader waits, a file without one is
/// not yet "not closed cleanly", and its arrival gives the footer's counts.
#[test]
fn the_footer_arrives_last() {
    let built = build_recording(30, 4);
    let bytes = &built.bytes;
    let footer_at = chunks_of(bytes).last().unwrap().0;
    let input = Growing::new(usize::MAX);
    input.append(&bytes[..footer_at]);
    let mut reader = RecordingReader::new(input.clone()).unwrap();
    let mut events = Vec::new();
    assert!(!drain(&mut reader, &mut events));
    assert_eq!(events, built.events);
    assert!(reader.footer().is_none());
    assert!(reader.warnings().is_empty(), "{:?}", reader.warnings());
    // Half the footer: still waiting, nothing said.
    let mid = (footer_at + bytes.len()) / 2;
    input.append(&bytes[footer_at..mid]);
    assert!(!drain(&mut reader, &mut events));
    assert!(reader.footer().is_none());
    input.append(&bytes[mid..]);
    assert!(!drain(&mut reader, &mut events));
    assert_eq!(reader.footer(), Some(&built.footer));
    input.end();
    assert!(drain(&mut reader, &mut events));
    assert!(reader.warnings().is_empty(), "{:?}", reader.warnings());
    assert_eq!(events.len(), 30);
}

/// Stopped while the recorder still writes: the chunk in flight is left out, and the
/// warnings say that is what a stop leaves (not a crash, not damage).
#[test]
fn stopped_while_still_written() {
    let built = build_recording(60, 7);
    let bytes = &built.bytes;
    let chunks = chunks_of(bytes);
    let (start, end, _) = chunks[chunks.len() / 2];
    let cut = (start + end) / 2;
    let input = Growing::new(usize::MAX);
    input.append(&bytes[..cut]);
    let mut reader = RecordingReader::new(input.clone()).unwrap();
    let mut events = Vec::new();
    assert!(!drain(&mut reader, &mut events));
    reader.mark_still_written();
    input.end();
    assert!(drain(&mut reader, &mut events));
    assert_eq!(events.len(), events_in_whole_chunks(bytes, cut));
    let w = reader.warnings();
    assert_eq!(w.len(), 2, "{w:?}");
    assert_eq!(
        w[0],
        format!(
            "{} bytes after the last complete chunk (offset {start}) left out: a chunk still \
             being written when reading stopped",
            cut - start
        )
    );
    assert!(
        w[1].starts_with("recording not closed yet: reading stopped before its footer"),
        "{w:?}"
    );
}

/// Damage met while the data pauses is skipped as in the whole file, with the same warning:
/// the skip's start is kept across the pause.
#[test]
fn damage_across_a_pause_is_reported_as_in_the_whole_file() {
    let built = build_recording(60, 7);
    let mut bytes = built.bytes.clone();
    let chunks = chunks_of(&bytes);
    let (start, end, _) = chunks[4];
    bytes[start] ^= 0xff; // its magic
    // Pauses inside the damaged chunk and in the next one's magic.
    let cuts = [start + 1, start + 9, (start + end) / 2, end + 2, end + 3];
    let got = read_in_pieces(&bytes, &cuts, 3, false);
    assert_same_as_whole(&got, &bytes);
    assert!(
        got.reader
            .warnings()
            .iter()
            .any(|w| w.starts_with(&format!("corrupt chunk at offset {start}"))),
        "{:?}",
        got.reader.warnings()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Any cut points, any read sizes, with or without a damaged byte after the header:
    /// what is read in pieces is what the whole file gives.
    #[test]
    fn pieces_read_as_the_whole_file(
        cuts in proptest::collection::vec(0usize..4000, 0..30),
        max_read in 1usize..200,
        damage in proptest::option::of((0usize..4000, 1u8..=255)),
    ) {
        let built = build_recording(40, 6);
        let mut bytes = built.bytes.clone();
        let header_end = chunks_of(&bytes)[0].1;
        if let Some((at, x)) = damage {
            let at = header_end + at % (bytes.len() - header_end);
            bytes[at] ^= x;
        }
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % bytes.len()).collect();
        cuts.sort_unstable();
        let got = read_in_pieces(&bytes, &cuts, max_read, damage.is_none());
        let (events, whole) = read_whole(&bytes);
        prop_assert_eq!(&got.events, &events);
        prop_assert_eq!(got.reader.warnings(), whole.warnings());
        prop_assert_eq!(got.reader.events_missing(), whole.events_missing());
    }
}

// ---- files: `open`, a RecordingSource over a file appended to ----

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("iosched-follow-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn append(path: &Path, bytes: &[u8]) {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
}

/// A recording whose events arrive out of order across chunks (as per-CPU drains do), so
/// that the reordering window holds events back between pieces.
fn disordered() -> Vec<u8> {
    let mut w = RecordingWriter::new(Vec::new(), &sample_header())
        .unwrap()
        .with_chunk_events(37);
    let n = 2000u64;
    for i in 0..n {
        let cpu = (i / 40) % 2;
        w.push(&event_at(10_000_000 + i * 100_000 - cpu * 3_000_000, i))
            .unwrap();
        if i % 500 == 0 {
            w.write_stats(&sample_stats(i)).unwrap();
        }
    }
    let footer = w.footer(sample_stats(n), 0, "test");
    w.finish(&footer).unwrap()
}

/// Reads a followed source until it waits (or ends); its events in time order.
fn drain_source(source: &mut dyn TraceSource, out: &mut Vec<Event>) -> bool {
    loop {
        let before = out.len();
        match source.next_batch(out, 100) {
            Ok(()) if out.len() == before => return true,
            Ok(()) => {}
            Err(e) if e.is_waiting() => return false,
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn open_waits_for_a_whole_header_and_refuses_what_is_no_recording() {
    let dir = scratch("open");
    let path = dir.join("rec.istrace");
    assert!(open(&path).unwrap().is_none(), "no file yet");
    let bytes = disordered();
    let header_end = chunks_of(&bytes)[0].1;
    for cut in [0, 3, 16, 20, header_end - 1] {
        fs::write(&path, &bytes[..cut]).unwrap();
        assert!(open(&path).unwrap().is_none(), "{cut} bytes");
    }
    fs::write(&path, &bytes[..header_end]).unwrap();
    assert!(open(&path).unwrap().is_some());

    let text = dir.join("notes.txt");
    for content in ["hi", "some text, longer than a file header and more"] {
        fs::write(&text, content).unwrap();
        let err = open(&text).err().expect("not a recording").to_string();
        assert!(err.contains("not an iosched-trace recording"), "{err}");
    }
    let blk = dir.join("sda.blktrace.0");
    fs::write(&blk, 0x6561_7407u32.to_le_bytes()).unwrap();
    let err = open(&blk).err().expect("blktrace").to_string();
    assert!(err.contains("blktrace data cannot be followed"), "{err}");
    let err = open(&dir).err().expect("a directory").to_string();
    assert!(err.contains("not a regular file"), "{err}");
    fs::remove_dir_all(&dir).unwrap();
}

/// A file appended to in pieces, read as a follower does: the same events in the same time
/// order, and the same warnings, as the finished file read at once; the arrivals are every
/// event in file order.
#[test]
fn a_file_appended_in_pieces_gives_what_the_finished_file_gives() {
    let dir = scratch("pieces");
    let path = dir.join("rec.istrace");
    let bytes = disordered();
    let chunks = chunks_of(&bytes);
    let header_end = chunks[0].1;
    append(&path, &bytes[..header_end]);
    let (mut source, follow) = open(&path).unwrap().unwrap();
    source.keep_arrivals();
    let mut events = Vec::new();
    let mut arrivals = Vec::new();
    let mut fed = header_end;
    // Cuts at chunk boundaries and inside chunks, alternately, up to the footer.
    let footer = chunks.len() - 1;
    for (i, &(start, end, _)) in chunks[..footer].iter().enumerate().skip(1) {
        let cut = if i % 2 == 0 { end } else { (start + end) / 2 };
        append(&path, &bytes[fed..cut]);
        fed = cut;
        assert!(!drain_source(&mut source, &mut events));
        source.take_arrivals(&mut arrivals);
        assert!(source.footer().is_none());
    }
    append(&path, &bytes[fed..]);
    assert!(!drain_source(&mut source, &mut events));
    assert!(source.footer().is_some(), "the footer was read");
    follow.end();
    assert!(drain_source(&mut source, &mut events));
    source.take_arrivals(&mut arrivals);
    assert_eq!(follow.bytes_read(), bytes.len() as u64);
    assert!(!follow.replaced());

    let mut whole = crate::trace_file::open(&path).unwrap();
    let mut expected = Vec::new();
    assert!(drain_source(whole.as_mut(), &mut expected));
    assert_eq!(events, expected);
    assert_eq!(source.warnings(), whole.warnings());
    assert!(
        source
            .warnings()
            .iter()
            .any(|w| w.contains("arrived later"))
            || source.warnings().is_empty(),
        "{:?}",
        source.warnings()
    );
    let (in_file_order, _) = read_whole(&bytes);
    assert_eq!(arrivals, in_file_order);
    fs::remove_dir_all(&dir).unwrap();
}

/// Stopped mid-chunk while the recorder writes on: what was whole is read, the rest is
/// left out even though more arrives meanwhile, and the warnings say so.
#[test]
fn ending_a_follow_reads_what_is_there_and_no_further() {
    let dir = scratch("stop");
    let path = dir.join("rec.istrace");
    let bytes = disordered();
    let chunks = chunks_of(&bytes);
    let (start, end, _) = chunks[chunks.len() / 2];
    let cut = (start + end) / 2;
    append(&path, &bytes[..cut]);
    let (mut source, follow) = open(&path).unwrap().unwrap();
    let mut events = Vec::new();
    assert!(!drain_source(&mut source, &mut events));
    source.mark_still_written();
    follow.end();
    // The recorder goes on writing after the stop: not read.
    append(&path, &bytes[cut..]);
    assert!(drain_source(&mut source, &mut events));
    assert_eq!(events.len(), events_in_whole_chunks(&bytes, cut));
    let w = source.warnings();
    assert!(
        w[0].ends_with("left out: a chunk still being written when reading stopped"),
        "{w:?}"
    );
    assert!(
        w.iter().any(|w| w.starts_with("recording not closed yet")),
        "{w:?}"
    );
    assert!(!w.iter().any(|w| w.contains("not closed cleanly")), "{w:?}");
    fs::remove_dir_all(&dir).unwrap();
}

/// A new recording started over the followed file cuts it to nothing: an error, not a
/// misread.
#[test]
fn a_file_cut_short_under_the_follower_is_an_error() {
    let dir = scratch("shrink");
    let path = dir.join("rec.istrace");
    let bytes = disordered();
    let chunks = chunks_of(&bytes);
    append(&path, &bytes[..chunks[3].1]);
    let (mut source, follow) = open(&path).unwrap().unwrap();
    let mut events = Vec::new();
    assert!(!drain_source(&mut source, &mut events));
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    let err = loop {
        match source.next_batch(&mut events, 100) {
            Err(e) if e.is_waiting() => panic!("waits on a file cut short"),
            Err(e) => break e,
            Ok(()) => {}
        }
    };
    assert!(
        err.to_string()
            .contains("another recording was started over it"),
        "{err}"
    );
    fs::remove_file(&path).unwrap();
    assert!(follow.replaced());
    fs::remove_dir_all(&dir).unwrap();
}

/// Events held for reordering at the end of what was written (a burst, then idle devices)
/// are released by the recorder's clock on request, not only by a newer event.
#[test]
fn the_writers_clock_releases_the_last_events_of_a_burst() {
    use crate::record::CpuSample;
    let dir = scratch("clock");
    let path = dir.join("rec.istrace");
    let mut w = RecordingWriter::new(Vec::new(), &sample_header()).unwrap();
    for i in 0..50u64 {
        w.push(&event_at(1_000_000_000 + i * 1_000_000, i)).unwrap();
    }
    let sample = |ts_ns| CpuSample {
        ts_ns,
        online_cpus: 2,
        ..Default::default()
    };
    // The recorder's clock, 300 ms after the burst: not yet settled.
    w.write_cpu(&sample(1_350_000_000)).unwrap();
    w.flush().unwrap();
    let at_first = w.get_ref().len();
    w.write_cpu(&sample(1_600_000_000)).unwrap();
    w.flush().unwrap();
    let bytes = w.get_ref().clone();
    append(&path, &bytes[..at_first]);
    let (mut source, _follow) = open(&path).unwrap().unwrap();
    let mut events = Vec::new();
    assert!(!drain_source(&mut source, &mut events));
    assert!(events.is_empty(), "held: all within 100 ms of the newest");
    source.release_by_writer_clock();
    assert!(!drain_source(&mut source, &mut events));
    assert!(events.is_empty(), "1.35 s - 0.5 s is before the burst");
    append(&path, &bytes[at_first..]);
    assert!(!drain_source(&mut source, &mut events));
    source.release_by_writer_clock();
    assert!(!drain_source(&mut source, &mut events));
    // 1.6 s - 0.5 s = 1.1 s: the burst (1.000-1.049 s) is out.
    assert_eq!(events.len(), 50);
    assert!(source.warnings().iter().all(|w| !w.contains("later")));
    fs::remove_dir_all(&dir).unwrap();
}
