//! The protobuf wire format, as much of it as a Perfetto trace needs: varints,
//! 64-bit fixed values and length-delimited fields (strings and nested messages).
//! (Encoding rules: protobuf's "Encoding" guide; a field's key is `number << 3 | wire type`.)
//!
//! A [`Message`] is a byte buffer that fields are appended to. A nested message is written in
//! place and its length put in front when it closes, so nesting allocates nothing.
//!
//! Owns: bytes on the wire. Must not: know any Perfetto field.

/// Wire types (protobuf encoding: 0 varint, 1 64-bit, 2 length-delimited).
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;

/// Appends `v` as a base-128 varint, low 7 bits first (at most 10 bytes).
pub fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// One message being encoded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    buf: Vec<u8>,
}

impl Message {
    pub fn new() -> Message {
        Message::default()
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Empties the buffer, keeping its allocation (for the next packet).
    pub fn clear(&mut self) {
        self.buf.clear();
    }

    fn key(&mut self, field: u32, wire_type: u64) {
        put_varint(&mut self.buf, (u64::from(field) << 3) | wire_type);
    }

    /// uint32, uint64, int32 and int64 (non-negative or two's complement in 10 bytes),
    /// enums.
    pub fn uint(&mut self, field: u32, v: u64) -> &mut Self {
        self.key(field, VARINT);
        put_varint(&mut self.buf, v);
        self
    }

    /// int64 (or int32: protobuf sign-extends negative int32s to 64 bits too).
    pub fn int(&mut self, field: u32, v: i64) -> &mut Self {
        self.uint(field, v as u64)
    }

    pub fn bool(&mut self, field: u32, v: bool) -> &mut Self {
        self.uint(field, u64::from(v))
    }

    /// fixed64 (little-endian, 8 bytes).
    pub fn fixed64(&mut self, field: u32, v: u64) -> &mut Self {
        self.key(field, FIXED64);
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// double (IEEE 754, little-endian, as a fixed64).
    pub fn double(&mut self, field: u32, v: f64) -> &mut Self {
        self.fixed64(field, v.to_bits())
    }

    pub fn bytes_field(&mut self, field: u32, v: &[u8]) -> &mut Self {
        self.key(field, LEN);
        put_varint(&mut self.buf, v.len() as u64);
        self.buf.extend_from_slice(v);
        self
    }

    pub fn string(&mut self, field: u32, v: &str) -> &mut Self {
        self.bytes_field(field, v.as_bytes())
    }

    /// A nested message whose fields `build` appends: written in place, then its length is
    /// inserted before it (a shift of a few bytes: our nested messages are small).
    pub fn nested(&mut self, field: u32, build: impl FnOnce(&mut Message)) -> &mut Self {
        self.key(field, LEN);
        let start = self.buf.len();
        build(self);
        let len = (self.buf.len() - start) as u64;
        let mut prefix = Vec::with_capacity(10);
        put_varint(&mut prefix, len);
        self.buf.splice(start..start, prefix);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(v: u64) -> Vec<u8> {
        let mut b = Vec::new();
        put_varint(&mut b, v);
        b
    }

    /// Decodes a varint the way the protobuf guide describes it, independently of
    /// `put_varint`: returns the value and the bytes used.
    fn read_varint(b: &[u8]) -> (u64, usize) {
        let mut v = 0u64;
        for (i, byte) in b.iter().enumerate() {
            v |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return (v, i + 1);
            }
        }
        panic!("unterminated varint {b:?}");
    }

    #[test]
    fn varint_edge_cases() {
        assert_eq!(varint(0), [0x00]);
        assert_eq!(varint(1), [0x01]);
        assert_eq!(varint(127), [0x7f]);
        assert_eq!(varint(128), [0x80, 0x01]);
        // The protobuf guide's example: 150 is 96 01.
        assert_eq!(varint(150), [0x96, 0x01]);
        assert_eq!(varint(16_383), [0xff, 0x7f]);
        assert_eq!(varint(16_384), [0x80, 0x80, 0x01]);
        assert_eq!(varint(u32::MAX as u64), [0xff, 0xff, 0xff, 0xff, 0x0f]);
        let max = varint(u64::MAX);
        assert_eq!(max.len(), 10);
        assert_eq!(max[9], 0x01);
        assert!(max[..9].iter().all(|b| *b == 0xff));
        // -1 as an int64 takes all ten bytes.
        let mut m = Message::new();
        m.int(1, -1);
        assert_eq!(m.bytes()[1..], max[..]);
    }

    #[test]
    fn varints_read_back() {
        for shift in 0..64 {
            for v in [(1u64 << shift) - 1, 1u64 << shift, (1u64 << shift) + 1] {
                let b = varint(v);
                assert_eq!(read_varint(&b), (v, b.len()), "{v}");
                assert_eq!(
                    b.len(),
                    (64 - v.leading_zeros() as usize).div_ceil(7).max(1)
                );
            }
        }
    }

    #[test]
    fn fields_have_their_keys_and_payloads() {
        let mut m = Message::new();
        m.uint(1, 150)
            .string(2, "testing")
            .fixed64(47, 0x0102_0304_0506_0708)
            .double(44, 1.5)
            .bool(87, true);
        let mut want = vec![0x08, 0x96, 0x01];
        // The guide's string example: field 2, "testing".
        want.extend_from_slice(&[0x12, 0x07]);
        want.extend_from_slice(b"testing");
        // Field 47, wire type 1: key 377 = f9 02.
        want.extend_from_slice(&[0xf9, 0x02, 8, 7, 6, 5, 4, 3, 2, 1]);
        // Field 44, wire type 1: key 353 = e1 02; 1.5 is 0x3ff8000000000000.
        want.extend_from_slice(&[0xe1, 0x02, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f]);
        // Field 87, varint: key 696 = b8 05.
        want.extend_from_slice(&[0xb8, 0x05, 0x01]);
        assert_eq!(m.bytes(), want);
    }

    #[test]
    fn nested_messages_get_their_length_in_front() {
        let mut m = Message::new();
        m.nested(3, |inner| {
            inner.uint(1, 150);
        });
        // The guide's embedded-message example: 1a 03 08 96 01.
        assert_eq!(m.bytes(), [0x1a, 0x03, 0x08, 0x96, 0x01]);

        // A nested message of 200 bytes needs a two-byte length.
        let mut m = Message::new();
        m.nested(1, |inner| {
            inner.bytes_field(2, &[7u8; 197]);
        });
        assert_eq!(&m.bytes()[..5], [0x0a, 0xc8, 0x01, 0x12, 0xc5]);
        assert_eq!(m.len(), 3 + 200);
        // Doubly nested.
        let mut m = Message::new();
        m.nested(1, |a| {
            a.uint(1, 1).nested(2, |b| {
                b.uint(1, 2);
            });
        });
        assert_eq!(m.bytes(), [0x0a, 0x06, 0x08, 0x01, 0x12, 0x02, 0x08, 0x02]);
    }
}
