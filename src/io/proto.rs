//! The protocol-buffer wire format, as much as tfc's files need (ONNX
//! models, TensorBoard events): a message
//! is a byte buffer of fields, each a key (field number and wire type)
//! followed by a varint, a little-endian fixed-width number, or a
//! length-delimited payload (strings, bytes, nested messages, packed
//! repeated numbers).
//!
//! Contract: [`Message`] writes fields in the order they are added, which
//! every protobuf reader accepts; nothing here knows ONNX's schema.
//!
//! Example: `Message::new().int(2, 17).text(1, "")` is an
//! `OperatorSetIdProto` for the default domain at opset 17.

/// The wire types this writer uses.
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const FIXED32: u64 = 5;
const LENGTH_DELIMITED: u64 = 2;

/// A protocol-buffer message being written.
#[derive(Clone, Debug, Default)]
pub struct Message {
    bytes: Vec<u8>,
}

impl Message {
    pub fn new() -> Message {
        Message::default()
    }

    /// The encoded message.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.bytes.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        self.bytes.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u64) {
        self.varint((u64::from(field) << 3) | wire);
    }

    /// An `int32`/`int64`/enum field (negative values as ten-byte varints,
    /// as protobuf encodes them).
    pub fn int(mut self, field: u32, v: i64) -> Message {
        self.key(field, VARINT);
        self.varint(v as u64);
        self
    }

    /// An unsigned `uint64`/`int64` field from a `u64`.
    pub fn uint(mut self, field: u32, v: u64) -> Message {
        self.key(field, VARINT);
        self.varint(v);
        self
    }

    /// A `double` field.
    pub fn double(mut self, field: u32, v: f64) -> Message {
        self.key(field, FIXED64);
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// A `float` field.
    pub fn float(mut self, field: u32, v: f32) -> Message {
        self.key(field, FIXED32);
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// A `bytes` field.
    pub fn bytes(mut self, field: u32, data: &[u8]) -> Message {
        self.key(field, LENGTH_DELIMITED);
        self.varint(data.len() as u64);
        self.bytes.extend_from_slice(data);
        self
    }

    /// A `string` field.
    pub fn text(self, field: u32, s: &str) -> Message {
        self.bytes(field, s.as_bytes())
    }

    /// A nested message field.
    pub fn message(self, field: u32, m: &Message) -> Message {
        self.bytes(field, &m.bytes)
    }

    /// A packed repeated `int64` field.
    pub fn packed_ints(self, field: u32, values: &[i64]) -> Message {
        let mut payload = Message::new();
        values.iter().for_each(|&v| payload.varint(v as u64));
        self.bytes(field, &payload.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::Message;

    #[test]
    fn fields_encode_as_protobuf_does() {
        // Values checked against protobuf's documented encodings:
        // field 1 = 150 is `08 96 01`; field 2 = "testing" is `12 07 74 65 73 74 69 6e 67`.
        assert_eq!(Message::new().int(1, 150).into_bytes(), [0x08, 0x96, 0x01]);
        assert_eq!(Message::new().text(2, "testing").into_bytes(), b"\x12\x07testing");
        // A negative int64 is ten bytes; a float is a little-endian fixed32.
        assert_eq!(Message::new().int(3, -1).into_bytes().len(), 11);
        assert_eq!(Message::new().float(2, 1.0).into_bytes(), [0x15, 0, 0, 0x80, 0x3f]);
        assert_eq!(Message::new().double(1, 0.0).into_bytes(), [0x09, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(Message::new().uint(2, 300).into_bytes(), [0x10, 0xAC, 0x02]);
        // A packed repeated field: key, payload length, varints.
        assert_eq!(Message::new().packed_ints(1, &[3, 270]).into_bytes(), [0x0a, 0x03, 0x03, 0x8e, 0x02]);
        let inner = Message::new().int(1, 1);
        assert_eq!(Message::new().message(7, &inner).into_bytes(), [0x3a, 0x02, 0x08, 0x01]);
    }
}
