//! blktrace's binary record, byte-exact (kernel `include/uapi/linux/blktrace_api.h`; summary
//! in docs/BLKTRACE.md): the 48-byte `struct blk_io_trace` of protocol version 7 and the
//! 64-byte `struct blk_io_trace2` of version 8, in either byte order, with their payload.
//!
//! Owns: constants, decoding one record from bytes, encoding one record. No files, no event
//! model (see `convert`).

use std::io::{self, Read, Write};

/// `BLK_IO_TRACE_MAGIC`: the upper 24 bits of `magic`; the low 8 are the version.
pub const MAGIC: u32 = 0x6561_7400;
pub const VERSION_7: u8 = 0x07;
pub const VERSION_8: u8 = 0x08;
/// `sizeof(struct blk_io_trace)`.
pub const HEADER_LEN_V7: usize = 48;
/// `sizeof(struct blk_io_trace2)`.
pub const HEADER_LEN_V8: usize = 64;
/// `TASK_COMM_LEN`: the payload of a process note.
pub const COMM_LEN: usize = 16;

/// Category bits (`enum blktrace_cat`), already shifted into `action` (`BLK_TC_ACT`).
pub mod cat {
    const fn act(tc: u64) -> u64 {
        tc << 16
    }
    pub const READ: u64 = act(1 << 0);
    pub const WRITE: u64 = act(1 << 1);
    pub const FLUSH: u64 = act(1 << 2);
    pub const SYNC: u64 = act(1 << 3);
    pub const QUEUE: u64 = act(1 << 4);
    pub const REQUEUE: u64 = act(1 << 5);
    pub const ISSUE: u64 = act(1 << 6);
    pub const COMPLETE: u64 = act(1 << 7);
    pub const FS: u64 = act(1 << 8);
    pub const PC: u64 = act(1 << 9);
    pub const NOTIFY: u64 = act(1 << 10);
    pub const AHEAD: u64 = act(1 << 11);
    pub const META: u64 = act(1 << 12);
    pub const DISCARD: u64 = act(1 << 13);
    pub const DRV_DATA: u64 = act(1 << 14);
    pub const FUA: u64 = act(1 << 15);
}

/// Actions (`enum blktrace_act`, the low 16 bits of `action`).
pub mod act {
    pub const QUEUE: u16 = 1;
    pub const BACKMERGE: u16 = 2;
    pub const FRONTMERGE: u16 = 3;
    pub const GETRQ: u16 = 4;
    pub const SLEEPRQ: u16 = 5;
    pub const REQUEUE: u16 = 6;
    pub const ISSUE: u16 = 7;
    pub const COMPLETE: u16 = 8;
    pub const PLUG: u16 = 9;
    pub const UNPLUG_IO: u16 = 10;
    pub const UNPLUG_TIMER: u16 = 11;
    pub const INSERT: u16 = 12;
    pub const SPLIT: u16 = 13;
    pub const BOUNCE: u16 = 14;
    pub const REMAP: u16 = 15;
    pub const ABORT: u16 = 16;
    pub const DRV_DATA: u16 = 17;
    /// Flag: a 64-bit cgroup id precedes the payload.
    pub const CGROUP: u16 = 0x100;
}

/// Notify actions (`enum blktrace_notify`), with the NOTIFY category.
pub mod notify {
    pub const PROCESS: u16 = 0;
    pub const TIMESTAMP: u16 = 1;
    pub const MESSAGE: u16 = 2;
}

/// The category each action carries (the kernel's `BLK_TA_*` constants).
pub fn action_category(action: u16) -> u64 {
    use act::*;
    match action {
        QUEUE | BACKMERGE | FRONTMERGE | GETRQ | SLEEPRQ | PLUG | UNPLUG_IO | UNPLUG_TIMER
        | INSERT | REMAP | ABORT => cat::QUEUE,
        REQUEUE => cat::REQUEUE,
        ISSUE => cat::ISSUE,
        COMPLETE => cat::COMPLETE,
        DRV_DATA => cat::DRV_DATA,
        _ => 0,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteOrder {
    Little,
    Big,
}

impl ByteOrder {
    pub const NATIVE: ByteOrder = if cfg!(target_endian = "big") {
        ByteOrder::Big
    } else {
        ByteOrder::Little
    };

    fn u16(self, b: &[u8]) -> u16 {
        let a = [b[0], b[1]];
        match self {
            Self::Little => u16::from_le_bytes(a),
            Self::Big => u16::from_be_bytes(a),
        }
    }

    fn u32(self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        match self {
            Self::Little => u32::from_le_bytes(a),
            Self::Big => u32::from_be_bytes(a),
        }
    }

    fn u64(self, b: &[u8]) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        match self {
            Self::Little => u64::from_le_bytes(a),
            Self::Big => u64::from_be_bytes(a),
        }
    }

    fn put_u16(self, out: &mut Vec<u8>, v: u16) {
        out.extend_from_slice(&match self {
            Self::Little => v.to_le_bytes(),
            Self::Big => v.to_be_bytes(),
        });
    }

    fn put_u32(self, out: &mut Vec<u8>, v: u32) {
        out.extend_from_slice(&match self {
            Self::Little => v.to_le_bytes(),
            Self::Big => v.to_be_bytes(),
        });
    }

    fn put_u64(self, out: &mut Vec<u8>, v: u64) {
        out.extend_from_slice(&match self {
            Self::Little => v.to_le_bytes(),
            Self::Big => v.to_be_bytes(),
        });
    }
}

/// The byte order and version a record's first four bytes announce, if they are a blktrace
/// magic at all (blkparse's `check_data_endianness`).
pub fn sniff(magic: [u8; 4]) -> Option<(ByteOrder, u8)> {
    for order in [ByteOrder::Little, ByteOrder::Big] {
        let m = order.u32(&magic);
        if m & 0xffff_ff00 == MAGIC {
            return Some((order, (m & 0xff) as u8));
        }
    }
    None
}

/// One record, header fields in host order, payload as stored (its multi-byte fields are
/// big-endian by the kernel's definition, except a notify's timestamp).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub version: u8,
    pub sequence: u32,
    pub time: u64,
    pub sector: u64,
    pub bytes: u32,
    /// Category bits << 16 | action (64 bits in version 8, 32 in version 7).
    pub action: u64,
    pub pid: u32,
    /// Kernel `dev_t` (major << 20 | minor).
    pub device: u32,
    pub cpu: u32,
    pub error: u16,
    /// Everything after the header, including a leading cgroup id (see [`Record::cgroup`]).
    pub pdu: Vec<u8>,
}

impl Record {
    /// The action without its category and cgroup flag.
    pub fn act(&self) -> u16 {
        (self.action & 0xffff) as u16 & !act::CGROUP
    }

    pub fn is_notify(&self) -> bool {
        self.action & cat::NOTIFY != 0
    }

    pub fn has(&self, category: u64) -> bool {
        self.action & category != 0
    }

    /// (cgroup id, payload after it).
    pub fn cgroup(&self) -> (Option<u64>, &[u8]) {
        if self.action & u64::from(act::CGROUP) != 0 && self.pdu.len() >= 8 {
            // The kernel writes the id in host order, like the header.
            (
                Some(u64::from_ne_bytes(
                    self.pdu[..8].try_into().unwrap_or_default(),
                )),
                &self.pdu[8..],
            )
        } else {
            (None, &self.pdu[..])
        }
    }

    /// A big-endian u64 payload (depth of U/UT, new sector of X).
    pub fn pdu_be64(&self) -> Option<u64> {
        let (_, pdu) = self.cgroup();
        Some(u64::from_be_bytes(pdu.get(..8)?.try_into().ok()?))
    }

    /// `struct blk_io_trace_remap` (always big-endian): (device_from, device_to, sector_from).
    pub fn remap(&self) -> Option<(u32, u32, u64)> {
        let (_, pdu) = self.cgroup();
        let pdu = pdu.get(..16)?;
        Some((
            ByteOrder::Big.u32(&pdu[0..]),
            ByteOrder::Big.u32(&pdu[4..]),
            ByteOrder::Big.u64(&pdu[8..]),
        ))
    }

    /// Encodes this record as protocol version 7 in `order`.
    pub fn encode_v7(&self, order: ByteOrder, out: &mut Vec<u8>) {
        order.put_u32(out, MAGIC | u32::from(VERSION_7));
        order.put_u32(out, self.sequence);
        order.put_u64(out, self.time);
        order.put_u64(out, self.sector);
        order.put_u32(out, self.bytes);
        order.put_u32(out, self.action as u32);
        order.put_u32(out, self.pid);
        order.put_u32(out, self.device);
        order.put_u32(out, self.cpu);
        order.put_u16(out, self.error);
        order.put_u16(out, self.pdu.len() as u16);
        out.extend_from_slice(&self.pdu);
    }

    /// Encodes this record as protocol version 8 (`struct blk_io_trace2`) in `order`.
    pub fn encode_v8(&self, order: ByteOrder, out: &mut Vec<u8>) {
        order.put_u32(out, MAGIC | u32::from(VERSION_8));
        order.put_u32(out, self.sequence);
        order.put_u64(out, self.time);
        order.put_u64(out, self.sector);
        order.put_u32(out, self.bytes);
        order.put_u32(out, self.pid);
        order.put_u64(out, self.action);
        order.put_u32(out, self.device);
        order.put_u32(out, self.cpu);
        order.put_u16(out, self.error);
        order.put_u16(out, self.pdu.len() as u16);
        out.extend_from_slice(&[0u8; 12]);
        out.extend_from_slice(&self.pdu);
    }

    pub fn write_v7(&self, order: ByteOrder, w: &mut impl Write) -> io::Result<()> {
        let mut buf = Vec::with_capacity(HEADER_LEN_V7 + self.pdu.len());
        self.encode_v7(order, &mut buf);
        w.write_all(&buf)
    }
}

/// Why a record could not be decoded. `offset` is the record's first byte in its stream.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("I/O error at byte {offset}: {source}")]
    Io {
        offset: u64,
        #[source]
        source: io::Error,
    },
    #[error("record at byte {offset} is cut short ({have} of {need} bytes): the file is truncated")]
    Truncated {
        offset: u64,
        have: usize,
        need: usize,
    },
    #[error("no blktrace magic at byte {offset} (found {found:02x?})")]
    BadMagic { offset: u64, found: [u8; 4] },
    #[error(
        "blktrace protocol version {version:#04x} at byte {offset} is not supported (this build \
         reads versions 7 and 8)"
    )]
    Version { offset: u64, version: u8 },
    #[error("record at byte {offset} changes byte order: the stream is corrupt")]
    OrderChange { offset: u64 },
}

/// Reads records one after another from a stream: the byte order is taken from the first
/// record, every later record must agree.
pub struct RecordReader<R: Read> {
    r: R,
    offset: u64,
    order: Option<ByteOrder>,
    buf: Vec<u8>,
}

impl<R: Read> RecordReader<R> {
    pub fn new(r: R) -> Self {
        RecordReader {
            r,
            offset: 0,
            order: None,
            buf: Vec::new(),
        }
    }

    /// Byte order of the stream, once a record was read.
    pub fn order(&self) -> Option<ByteOrder> {
        self.order
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Reads up to `buf.len()` bytes; returns how many (fewer only at the end of the stream).
    fn fill(&mut self, at: usize, len: usize) -> Result<usize, RecordError> {
        self.buf.resize(at + len, 0);
        let mut got = 0;
        while got < len {
            match self.r.read(&mut self.buf[at + got..at + len]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(RecordError::Io {
                        offset: self.offset,
                        source,
                    });
                }
            }
        }
        Ok(got)
    }

    /// The next record; `Ok(None)` at a clean end of the stream.
    pub fn next_record(&mut self) -> Result<Option<Record>, RecordError> {
        let offset = self.offset;
        let got = self.fill(0, 4)?;
        if got == 0 {
            return Ok(None);
        }
        if got < 4 {
            return Err(RecordError::Truncated {
                offset,
                have: got,
                need: 4,
            });
        }
        let magic = [self.buf[0], self.buf[1], self.buf[2], self.buf[3]];
        let (order, version) = sniff(magic).ok_or(RecordError::BadMagic {
            offset,
            found: magic,
        })?;
        match self.order {
            Some(o) if o != order => return Err(RecordError::OrderChange { offset }),
            _ => {}
        }
        let header_len = match version {
            VERSION_7 => HEADER_LEN_V7,
            VERSION_8 => HEADER_LEN_V8,
            _ => return Err(RecordError::Version { offset, version }),
        };
        let got = self.fill(4, header_len - 4)?;
        if got < header_len - 4 {
            return Err(RecordError::Truncated {
                offset,
                have: 4 + got,
                need: header_len,
            });
        }
        let h = &self.buf[..header_len];
        let mut rec = Record {
            version,
            sequence: order.u32(&h[4..]),
            time: order.u64(&h[8..]),
            sector: order.u64(&h[16..]),
            bytes: order.u32(&h[24..]),
            ..Record::default()
        };
        let pdu_len = if version == VERSION_7 {
            rec.action = u64::from(order.u32(&h[28..]));
            rec.pid = order.u32(&h[32..]);
            rec.device = order.u32(&h[36..]);
            rec.cpu = order.u32(&h[40..]);
            rec.error = order.u16(&h[44..]);
            order.u16(&h[46..])
        } else {
            rec.pid = order.u32(&h[28..]);
            rec.action = order.u64(&h[32..]);
            rec.device = order.u32(&h[40..]);
            rec.cpu = order.u32(&h[44..]);
            rec.error = order.u16(&h[48..]);
            order.u16(&h[50..])
        };
        let pdu_len = usize::from(pdu_len);
        let got = self.fill(header_len, pdu_len)?;
        if got < pdu_len {
            return Err(RecordError::Truncated {
                offset,
                have: header_len + got,
                need: header_len + pdu_len,
            });
        }
        rec.pdu = self.buf[header_len..header_len + pdu_len].to_vec();
        self.order = Some(order);
        self.offset += (header_len + pdu_len) as u64;
        Ok(Some(rec))
    }
}
