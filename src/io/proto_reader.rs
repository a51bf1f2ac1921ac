//! Reading the protocol-buffer wire format from untrusted bytes (ONNX
//! models): the fields of one message, in file order, each a field number
//! and a varint, a fixed-width number, or a length-delimited payload.
//!
//! Contract: [`Fields`] never panics and never allocates: a
//! length-delimited payload is a sub-slice of the input, handed out only
//! after its declared length is checked against the bytes left, so a
//! corrupt length cannot make a caller allocate more than the file holds.
//! Errors are [`WireError`]s with the byte offset inside the message being
//! read. Nested messages are read by the caller with a new [`Fields`] over
//! the payload, so the caller bounds the nesting depth. Packed repeated
//! numbers are read with [`varints`], [`fixed32s`] and [`fixed64s`], which
//! also accept the unpacked form one element at a time.
//!
//! Example: the bytes `08 96 01` are one field: number 1, `Value::Varint(150)`.

/// The wire types of protobuf; groups (3 and 4) are long deprecated and
/// refused.
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LENGTH_DELIMITED: u64 = 2;
const FIXED32: u64 = 5;

/// What is wrong with the bytes of a message, and where.
#[derive(Clone, Debug, PartialEq)]
pub struct WireError {
    pub offset: usize,
    pub message: String,
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}", self.message, self.offset)
    }
}

/// One field's value as it is on the wire.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
}

/// The fields of one message, in order.
pub struct Fields<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    pub fn new(bytes: &'a [u8]) -> Fields<'a> {
        Fields { bytes, pos: 0 }
    }

    fn fail<T>(&self, at: usize, message: impl Into<String>) -> Result<T, WireError> {
        Err(WireError { offset: at, message: message.into() })
    }

    fn varint(&mut self) -> Result<u64, WireError> {
        let start = self.pos;
        match read_varint(&self.bytes[self.pos..]) {
            Some((v, used)) => {
                self.pos += used;
                Ok(v)
            }
            None => self.fail(start, "a varint is truncated or longer than ten bytes"),
        }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], WireError> {
        let left = self.bytes.len() - self.pos;
        if n > left {
            return self.fail(self.pos, format!("{what} of {n} bytes, but only {left} are left"));
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.bytes.len() {
            return None;
        }
        let start = self.pos;
        let field = (|| {
            let key = self.varint()?;
            let number = key >> 3;
            if number == 0 || number > u64::from(u32::MAX >> 3) {
                return self.fail(start, format!("field number {number} is out of range"));
            }
            let value = match key & 7 {
                VARINT => Value::Varint(self.varint()?),
                FIXED64 => {
                    let b = self.take(8, "a fixed64")?;
                    Value::Fixed64(u64::from_le_bytes(b.try_into().unwrap_or_default()))
                }
                FIXED32 => {
                    let b = self.take(4, "a fixed32")?;
                    Value::Fixed32(u32::from_le_bytes(b.try_into().unwrap_or_default()))
                }
                LENGTH_DELIMITED => {
                    let n = self.varint()?;
                    let n = usize::try_from(n).unwrap_or(usize::MAX);
                    Value::Bytes(self.take(n, "a length-delimited field")?)
                }
                wire => return self.fail(start, format!("wire type {wire} (of field {number}) is not supported")),
            };
            Ok((number as u32, value))
        })();
        if field.is_err() {
            // Stop after the first error: the rest cannot be framed.
            self.pos = self.bytes.len();
        }
        Some(field)
    }
}

/// A varint at the start of `b` and the bytes it used, or `None` when it
/// is truncated or longer than ten bytes.
fn read_varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for (i, &byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// Appends the numbers of a repeated varint field: one unpacked element,
/// or a packed run of them.
pub fn varints(value: Value<'_>, out: &mut Vec<u64>) -> Result<(), WireError> {
    match value {
        Value::Varint(v) => out.push(v),
        Value::Bytes(mut b) => {
            let total = b.len();
            while !b.is_empty() {
                let (v, used) = read_varint(b).ok_or_else(|| WireError {
                    offset: total - b.len(),
                    message: "a packed varint is truncated".into(),
                })?;
                out.push(v);
                b = &b[used..];
            }
        }
        other => return Err(wrong_wire("varints", other)),
    }
    Ok(())
}

/// Appends the numbers of a repeated `float`/`fixed32` field.
pub fn fixed32s(value: Value<'_>, out: &mut Vec<u32>) -> Result<(), WireError> {
    match value {
        Value::Fixed32(v) => out.push(v),
        Value::Bytes(b) if b.len() % 4 == 0 => {
            out.extend(b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        }
        other => return Err(wrong_wire("4-byte numbers", other)),
    }
    Ok(())
}

/// Appends the numbers of a repeated `double`/`fixed64` field.
pub fn fixed64s(value: Value<'_>, out: &mut Vec<u64>) -> Result<(), WireError> {
    match value {
        Value::Fixed64(v) => out.push(v),
        Value::Bytes(b) if b.len() % 8 == 0 => out.extend(b.chunks_exact(8).map(|c| {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            u64::from_le_bytes(a)
        })),
        other => return Err(wrong_wire("8-byte numbers", other)),
    }
    Ok(())
}

fn wrong_wire(expected: &str, got: Value<'_>) -> WireError {
    let got = match got {
        Value::Varint(_) => "a varint".to_string(),
        Value::Fixed64(_) => "a fixed64".to_string(),
        Value::Fixed32(_) => "a fixed32".to_string(),
        Value::Bytes(b) => format!("{} bytes", b.len()),
    };
    WireError { offset: 0, message: format!("expected {expected}, found {got}") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::proto::Message;

    fn all(bytes: &[u8]) -> Result<Vec<(u32, Value<'_>)>, WireError> {
        Fields::new(bytes).collect()
    }

    #[test]
    fn reads_what_the_writer_writes() {
        let inner = Message::new().int(1, 1);
        let m = Message::new()
            .int(1, 150)
            .int(2, -1)
            .text(3, "testing")
            .float(4, 1.5)
            .double(5, 2.5)
            .packed_ints(6, &[3, 270, -2])
            .message(7, &inner)
            .into_bytes();
        let fields = all(&m).unwrap();
        assert_eq!(fields[0], (1, Value::Varint(150)));
        assert_eq!(fields[1], (2, Value::Varint(u64::MAX)));
        assert_eq!(fields[2], (3, Value::Bytes(b"testing")));
        assert_eq!(fields[3], (4, Value::Fixed32(1.5f32.to_bits())));
        assert_eq!(fields[4], (5, Value::Fixed64(2.5f64.to_bits())));
        let mut ints = Vec::new();
        varints(fields[5].1, &mut ints).unwrap();
        assert_eq!(ints.iter().map(|&v| v as i64).collect::<Vec<_>>(), [3, 270, -2]);
        assert_eq!(fields[6], (7, Value::Bytes(&[0x08, 0x01])));
    }

    #[test]
    fn damaged_bytes_are_errors_not_panics() {
        // A length beyond the end, a truncated varint, a group, field 0.
        assert!(all(&[0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2]).unwrap_err().message.contains("only 2 are left"));
        assert!(all(&[0x08, 0x80]).is_err());
        assert!(all(&[0x0b]).unwrap_err().message.contains("wire type 3"));
        assert!(all(&[0x00, 0x01]).unwrap_err().message.contains("field number 0"));
        assert!(all(&[0x08; 11]).is_err());
        let mut out = Vec::new();
        assert!(fixed32s(Value::Bytes(&[1, 2, 3]), &mut out).is_err());
        assert!(varints(Value::Bytes(&[0x80]), &mut Vec::new()).is_err());
    }
}
