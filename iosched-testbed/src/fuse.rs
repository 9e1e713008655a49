//! The FUSE kernel protocol (`include/uapi/linux/fuse.h`), only as much of it as a server of
//! one fixed-size regular file needs: request parsing from the bytes read off `/dev/fuse`,
//! reply encoding, and the constants. No I/O here.
//!
//! Every message starts with a header; integers are in native byte order. We answer INIT with
//! protocol 7.31 at most: every structure used below has had its current layout since then,
//! and newer features are opt-in flags we do not set.

use thiserror::Error;

pub const KERNEL_VERSION: u32 = 7;
/// The minor version we speak (or the kernel's, if older).
pub const MAX_MINOR: u32 = 31;

pub mod opcode {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const ACCESS: u32 = 34;
    pub const INTERRUPT: u32 = 36;
    pub const DESTROY: u32 = 38;
    pub const BATCH_FORGET: u32 = 42;
}

/// INIT flags (`fuse_init_in.flags`, `fuse_init_out.flags`).
pub mod init_flag {
    /// Reads may be sent asynchronously (several in flight).
    pub const ASYNC_READ: u32 = 1 << 0;
    /// Writes larger than a page.
    pub const BIG_WRITES: u32 = 1 << 5;
    /// Asynchronous direct I/O: the loop device's requests reach us concurrently instead of
    /// one at a time per submitter.
    pub const ASYNC_DIO: u32 = 1 << 15;
    /// `max_pages` in the reply is valid: requests up to that many pages.
    pub const MAX_PAGES: u32 = 1 << 22;
}

/// OPEN reply flags.
pub mod open_flag {
    /// Bypass the page cache: every read and write of the file reaches us with its real
    /// offset and size.
    pub const DIRECT_IO: u32 = 1 << 0;
    /// No FLUSH on close.
    pub const NOFLUSH: u32 = 1 << 5;
    /// Direct writes need not hold the inode lock against each other.
    pub const PARALLEL_DIRECT_WRITES: u32 = 1 << 6;
}

/// `FATTR_SIZE` in `fuse_setattr_in.valid`.
pub const FATTR_SIZE: u32 = 1 << 3;
/// The root node: our file.
pub const ROOT_ID: u64 = 1;

pub const IN_HEADER_LEN: usize = 40;
pub const OUT_HEADER_LEN: usize = 16;
/// `fuse_read_in` and `fuse_write_in`: fh, offset, size, flags, lock_owner, flags, padding.
pub const RW_IN_LEN: usize = 40;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ProtocolError {
    #[error("request of {got} bytes is shorter than its {need}-byte header or body")]
    Truncated { got: usize, need: usize },
    #[error("request header says {said} bytes, but {got} were read")]
    LengthMismatch { said: usize, got: usize },
    #[error("kernel speaks FUSE {0}.x; this server needs 7.x")]
    Version(u32),
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn need(b: &[u8], len: usize) -> Result<(), ProtocolError> {
    if b.len() < len {
        Err(ProtocolError::Truncated {
            got: b.len(),
            need: len,
        })
    } else {
        Ok(())
    }
}

/// `fuse_in_header`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InHeader {
    pub len: u32,
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    /// Length of extensions after the request body, in 8-byte units.
    pub total_extlen: u16,
}

/// One request as read from `/dev/fuse`: its header and the bytes after it.
#[derive(Debug)]
pub struct Request<'a> {
    pub header: InHeader,
    pub body: &'a [u8],
}

impl<'a> Request<'a> {
    /// Splits one read of `/dev/fuse` (exactly one request) into header and body.
    pub fn parse(buf: &'a [u8]) -> Result<Self, ProtocolError> {
        need(buf, IN_HEADER_LEN)?;
        let header = InHeader {
            len: u32_at(buf, 0),
            opcode: u32_at(buf, 4),
            unique: u64_at(buf, 8),
            nodeid: u64_at(buf, 16),
            total_extlen: u16_at(buf, 36),
        };
        if header.len as usize != buf.len() {
            return Err(ProtocolError::LengthMismatch {
                said: header.len as usize,
                got: buf.len(),
            });
        }
        Ok(Self {
            header,
            body: &buf[IN_HEADER_LEN..],
        })
    }

    pub fn init(&self) -> Result<InitIn, ProtocolError> {
        need(self.body, 16)?;
        let major = u32_at(self.body, 0);
        if major != KERNEL_VERSION {
            return Err(ProtocolError::Version(major));
        }
        Ok(InitIn {
            minor: u32_at(self.body, 4),
            max_readahead: u32_at(self.body, 8),
            flags: u32_at(self.body, 12),
        })
    }

    /// READ's (offset, size).
    pub fn read(&self) -> Result<(u64, u32), ProtocolError> {
        need(self.body, RW_IN_LEN)?;
        Ok((u64_at(self.body, 8), u32_at(self.body, 16)))
    }

    /// WRITE's offset and data (the data follows the 40-byte `fuse_write_in`).
    pub fn write(&self) -> Result<(u64, &'a [u8]), ProtocolError> {
        need(self.body, RW_IN_LEN)?;
        let size = u32_at(self.body, 16) as usize;
        need(self.body, RW_IN_LEN + size)?;
        Ok((
            u64_at(self.body, 8),
            &self.body[RW_IN_LEN..RW_IN_LEN + size],
        ))
    }

    /// SETATTR's `valid` mask and requested size.
    pub fn setattr(&self) -> Result<(u32, u64), ProtocolError> {
        // valid, padding, fh, size, ...
        need(self.body, 24)?;
        Ok((u32_at(self.body, 0), u64_at(self.body, 16)))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitIn {
    pub minor: u32,
    pub max_readahead: u32,
    pub flags: u32,
}

/// Starts a reply: the 16-byte `fuse_out_header` with the total length filled in.
pub fn out_header(unique: u64, error: i32, body_len: usize) -> [u8; OUT_HEADER_LEN] {
    let mut h = [0u8; OUT_HEADER_LEN];
    let len = u32::try_from(OUT_HEADER_LEN + body_len).expect("replies are small");
    h[0..4].copy_from_slice(&len.to_ne_bytes());
    h[4..8].copy_from_slice(&error.to_ne_bytes());
    h[8..16].copy_from_slice(&unique.to_ne_bytes());
    h
}

/// A little-endian-free byte builder for reply bodies (native order, as the kernel reads).
#[derive(Default)]
struct Body(Vec<u8>);

impl Body {
    fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    fn zeros(mut self, n: usize) -> Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
}

/// What we answer INIT with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitOut {
    pub minor: u32,
    pub max_readahead: u32,
    pub flags: u32,
    pub max_background: u16,
    pub congestion_threshold: u16,
    pub max_write: u32,
    pub max_pages: u16,
}

/// `fuse_init_out`, 64 bytes.
pub fn init_out(o: &InitOut) -> Vec<u8> {
    let b = Body::default()
        .u32(KERNEL_VERSION)
        .u32(o.minor)
        .u32(o.max_readahead)
        .u32(o.flags)
        .u16(o.max_background)
        .u16(o.congestion_threshold)
        .u32(o.max_write)
        .u32(1) // time_gran: 1 ns
        .u16(o.max_pages)
        .u16(0) // map_alignment
        .u32(0) // flags2
        .zeros(28); // max_stack_depth, request_timeout, unused
    debug_assert_eq!(b.0.len(), 64);
    b.0
}

/// The attributes of our one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileAttr {
    pub size: u64,
    /// Mode bits including the file type (S_IFREG | 0o644).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// `fuse_attr_out`: validity (1 s) then `fuse_attr` (88 bytes).
pub fn attr_out(a: &FileAttr) -> Vec<u8> {
    let b = Body::default()
        .u64(1) // attr_valid, seconds
        .u32(0) // attr_valid_nsec
        .u32(0) // dummy
        .u64(ROOT_ID) // ino
        .u64(a.size)
        .u64(a.size.div_ceil(512)) // blocks
        .u64(0) // atime
        .u64(0) // mtime
        .u64(0) // ctime
        .u32(0)
        .u32(0)
        .u32(0) // *timensec
        .u32(a.mode)
        .u32(1) // nlink
        .u32(a.uid)
        .u32(a.gid)
        .u32(0) // rdev
        .u32(4096) // blksize
        .u32(0); // flags
    debug_assert_eq!(b.0.len(), 104);
    b.0
}

/// `fuse_open_out`.
pub fn open_out(fh: u64, open_flags: u32) -> Vec<u8> {
    Body::default().u64(fh).u32(open_flags).u32(0).0
}

/// `fuse_write_out`.
pub fn write_out(size: u32) -> Vec<u8> {
    Body::default().u32(size).u32(0).0
}

/// `fuse_statfs_out` for a file system holding `size` bytes, all used.
pub fn statfs_out(size: u64) -> Vec<u8> {
    let b = Body::default()
        .u64(size.div_ceil(4096)) // blocks
        .u64(0) // bfree
        .u64(0) // bavail
        .u64(1) // files
        .u64(0) // ffree
        .u32(4096) // bsize
        .u32(255) // namelen
        .u32(4096) // frsize
        .u32(0) // padding
        .zeros(24); // spare
    debug_assert_eq!(b.0.len(), 80);
    b.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(opcode: u32, unique: u64, body: &[u8]) -> Vec<u8> {
        let len = (IN_HEADER_LEN + body.len()) as u32;
        let mut b = Vec::new();
        b.extend_from_slice(&len.to_ne_bytes());
        b.extend_from_slice(&opcode.to_ne_bytes());
        b.extend_from_slice(&unique.to_ne_bytes());
        b.extend_from_slice(&ROOT_ID.to_ne_bytes());
        b.extend_from_slice(&[0; 16]); // uid, gid, pid, extlen, padding
        b.extend_from_slice(body);
        b
    }

    fn rw_in(offset: u64, size: u32) -> Vec<u8> {
        Body::default()
            .u64(7)
            .u64(offset)
            .u32(size)
            .u32(0)
            .u64(0)
            .u32(0)
            .u32(0)
            .0
    }

    #[test]
    fn parses_read_and_write() {
        let buf = request(opcode::READ, 42, &rw_in(1 << 20, 4096));
        let req = Request::parse(&buf).unwrap();
        assert_eq!(req.header.opcode, opcode::READ);
        assert_eq!(req.header.unique, 42);
        assert_eq!(req.read().unwrap(), (1 << 20, 4096));

        let mut body = rw_in(8192, 3);
        body.extend_from_slice(b"abc");
        let buf = request(opcode::WRITE, 43, &body);
        let req = Request::parse(&buf).unwrap();
        assert_eq!(req.write().unwrap(), (8192, &b"abc"[..]));
    }

    #[test]
    fn rejects_truncated_and_inconsistent_requests() {
        assert!(matches!(
            Request::parse(&[0; 10]),
            Err(ProtocolError::Truncated { got: 10, .. })
        ));
        let mut buf = request(opcode::READ, 1, &rw_in(0, 512));
        buf.push(0);
        assert!(matches!(
            Request::parse(&buf),
            Err(ProtocolError::LengthMismatch { .. })
        ));
        // A WRITE claiming more data than it carries.
        let buf = request(opcode::WRITE, 1, &rw_in(0, 4096));
        let req = Request::parse(&buf).unwrap();
        assert!(matches!(req.write(), Err(ProtocolError::Truncated { .. })));
        let buf = request(opcode::READ, 1, &[0; 8]);
        assert!(Request::parse(&buf).unwrap().read().is_err());
    }

    #[test]
    fn init_checks_the_major_version() {
        let body = Body::default().u32(7).u32(45).u32(0x20000).u32(0xffff).0;
        let buf = request(opcode::INIT, 1, &body);
        let init = Request::parse(&buf).unwrap().init().unwrap();
        assert_eq!(
            init,
            InitIn {
                minor: 45,
                max_readahead: 0x20000,
                flags: 0xffff
            }
        );
        let body = Body::default().u32(8).u32(0).u32(0).u32(0).0;
        let buf = request(opcode::INIT, 1, &body);
        assert_eq!(
            Request::parse(&buf).unwrap().init(),
            Err(ProtocolError::Version(8))
        );
    }

    #[test]
    fn replies_have_the_kernel_layouts() {
        assert_eq!(
            init_out(&InitOut {
                minor: 31,
                max_readahead: 0,
                flags: 0,
                max_background: 1,
                congestion_threshold: 1,
                max_write: 1 << 20,
                max_pages: 256,
            })
            .len(),
            64
        );
        let attr = attr_out(&FileAttr {
            size: 1 << 30,
            mode: 0o100644,
            uid: 0,
            gid: 0,
        });
        assert_eq!(attr.len(), 104);
        assert_eq!(u64_at(&attr, 24), 1 << 30);
        assert_eq!(open_out(1, open_flag::DIRECT_IO).len(), 16);
        assert_eq!(write_out(5).len(), 8);
        assert_eq!(statfs_out(4096).len(), 80);
        let h = out_header(9, -2, 8);
        assert_eq!(u32_at(&h, 0), 24);
        assert_eq!(i32::from_ne_bytes(h[4..8].try_into().unwrap()), -2);
        assert_eq!(u64_at(&h, 8), 9);
    }
}
