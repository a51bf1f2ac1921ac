//! TensorBoard event files, written by a training `log … format =
//! "tensorboard"` (§9): `events.out.tfevents.<seconds>.<host>` in the log's
//! directory, which `tensorboard --logdir` and its Python readers open.
//!
//! Contract: the file is a sequence of TFRecords — little-endian u64 length,
//! masked CRC32C of those 8 bytes, the data, masked CRC32C of the data —
//! each holding one `tensorflow.Event` protobuf. The first record carries
//! `file_version: "brain.Event:2"`; every later one `wall_time`, `step` and
//! a `Summary` with one `Value { tag, simple_value }` per scalar, or (a
//! resumed run's first) a `SessionLog` START that makes TensorBoard drop
//! the points a stopped run logged after its checkpoint. The
//! protobufs are written by `io::proto` (no protobuf crate). A new writer never overwrites an existing
//! file: a second run in the same second gets a name with its process id.
//!
//! Example: `EventWriter::create(Path::new("runs/exp1"))?.scalars(20,
//! wall_time, &[("loss", 0.25), ("accuracy", 0.9)])` appends one event
//! with two values at step 20.

use super::loaders::masked_crc;
use super::proto::Message;
use std::io::Write;
use std::path::{Path, PathBuf};

/// An open event file; each `scalars` call appends one record.
pub struct EventWriter {
    file: std::fs::File,
    pub path: PathBuf,
}

impl EventWriter {
    /// Creates `dir` if needed and a fresh event file in it, starting with
    /// the file-version record.
    pub fn create(dir: &Path) -> std::io::Result<EventWriter> {
        std::fs::create_dir_all(dir)?;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let base = format!("events.out.tfevents.{}.{}", now.as_secs(), hostname());
        let pid = std::process::id();
        // `create_new` so that two runs logging into one directory never
        // truncate each other's events.
        let mut attempt = 0u32;
        let (file, path) = loop {
            let name = match attempt {
                0 => base.clone(),
                1 => format!("{base}.{pid}"),
                n => format!("{base}.{pid}.{n}"),
            };
            let path = dir.join(name);
            match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(f) => break (f, path),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 100 => attempt += 1,
                Err(e) => return Err(e),
            }
        };
        let mut w = EventWriter { file, path };
        let event = Message::new().double(1, now.as_secs_f64()).text(3, "brain.Event:2");
        w.file.write_all(&record(&event.into_bytes()))?;
        Ok(w)
    }

    /// Appends the event that marks a restart at `step`: a `SessionLog`
    /// (field 7) with status START (field 1 = 1). TensorBoard's readers
    /// then drop every earlier-written event at `step` or later, which a
    /// run resumed from a checkpoint writes again.
    pub fn restart(&mut self, step: u64, wall_time: f64) -> std::io::Result<()> {
        let start = Message::new().int(1, 1);
        let event = Message::new().double(1, wall_time).uint(2, step).message(7, &start);
        self.file.write_all(&record(&event.into_bytes()))
    }

    /// Appends one event at `step` holding `values` as scalar summaries.
    pub fn scalars(&mut self, step: u64, wall_time: f64, values: &[(&str, f64)]) -> std::io::Result<()> {
        self.file.write_all(&record(&scalar_event(step, wall_time, values)))
    }
}

/// The `Event` message for one point: `wall_time` (1, double), `step` (2,
/// int64), `summary` (5) with a `Value` (1) per scalar: `tag` (1, string),
/// `simple_value` (2, float).
fn scalar_event(step: u64, wall_time: f64, values: &[(&str, f64)]) -> Vec<u8> {
    let mut summary = Message::new();
    for (tag, v) in values {
        summary = summary.message(1, &Message::new().text(1, tag).float(2, *v as f32));
    }
    Message::new().double(1, wall_time).uint(2, step).message(5, &summary).into_bytes()
}

/// One TFRecord around `data`.
fn record(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend(len);
    out.extend(masked_crc(&len).to_le_bytes());
    out.extend(data);
    out.extend(masked_crc(data).to_le_bytes());
    out
}

/// The machine's name for the file name, as TensorFlow's writers use it.
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its whole length, which is what we pass.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    let name: String = String::from_utf8_lossy(&buf[..end])
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_' { c } else { '_' })
        .collect();
    if ok && !name.is_empty() {
        name
    } else {
        "localhost".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_frames_its_data_with_checked_lengths() {
        let r = record(b"abc");
        assert_eq!(r.len(), 8 + 4 + 3 + 4);
        assert_eq!(&r[..8], &3u64.to_le_bytes());
        assert_eq!(u32::from_le_bytes(r[8..12].try_into().unwrap()), masked_crc(&3u64.to_le_bytes()));
        assert_eq!(&r[12..15], b"abc");
        assert_eq!(u32::from_le_bytes(r[15..].try_into().unwrap()), masked_crc(b"abc"));
    }

    #[test]
    fn a_restart_is_a_session_log_start_at_its_step() {
        let dir = std::env::temp_dir().join(format!("tfc-tensorboard-unit-{}", std::process::id()));
        let mut w = EventWriter::create(&dir).unwrap();
        w.restart(9, 0.0).unwrap();
        let bytes = std::fs::read(&w.path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        // The second record: wall_time 0, step 9, session_log (7) {status: START}.
        let want = [0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 9, 0x3A, 2, 0x08, 1];
        assert!(bytes.ends_with(&[&want[..], &masked_crc(&want).to_le_bytes()].concat()));
    }

    #[test]
    fn a_scalar_event_is_the_protobuf_tensorflow_writes() {
        // Event{wall_time: 0.0, step: 3, summary{value{tag: "a", simple_value: 1.0}}}.
        let e = scalar_event(3, 0.0, &[("a", 1.0)]);
        let want = [
            0x09, 0, 0, 0, 0, 0, 0, 0, 0, // wall_time
            0x10, 3, // step
            0x2A, 10, 0x0A, 8, 0x0A, 1, b'a', 0x15, 0, 0, 0x80, 0x3F, // summary
        ];
        assert_eq!(e, want);
    }
}
