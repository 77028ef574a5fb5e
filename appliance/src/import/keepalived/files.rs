//! The importer's only I/O: reading a keepalived.conf from disk, bounded. A file is read in
//! chunks, each checked for bytes no text file has before the next is read, and never past
//! [`MAX_FILE`] bytes: `/dev/zero`, a binary or a huge log is refused after its first chunk,
//! not held in memory whole.

use std::io::Read;
use std::path::Path;

use super::parse::{self, SyntaxError};

/// The largest keepalived.conf read (100,000 virtual servers take about 22 MiB).
pub const MAX_FILE: usize = 32 << 20;

/// Bytes read and checked at a time.
const CHUNK: usize = 64 << 10;

/// Why a file could not be read as keepalived.conf text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read: {0}")]
    Io(String),
    #[error(
        "larger than {} MiB: too large to be a keepalived.conf this importer reads",
        MAX_FILE >> 20
    )]
    TooLarge,
    #[error("{0}")]
    NotText(SyntaxError),
}

/// The contents of `path`, refused at the first chunk with a byte that is not text, or
/// once over [`MAX_FILE`].
pub fn read(path: &Path) -> Result<Vec<u8>, ReadError> {
    let file = std::fs::File::open(path).map_err(|e| ReadError::Io(e.to_string()))?;
    read_bounded(file)
}

/// [`read`] over any reader.
pub fn read_bounded(mut r: impl Read) -> Result<Vec<u8>, ReadError> {
    let mut out = Vec::new();
    let mut chunk = vec![0u8; CHUNK];
    loop {
        let n = match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadError::Io(e.to_string())),
        };
        if out.len() + n > MAX_FILE {
            return Err(ReadError::TooLarge);
        }
        let start = out.len();
        out.extend_from_slice(&chunk[..n]);
        // A control byte ends the read at once; UTF-8 is judged whole once read (a
        // character may straddle two chunks).
        if let Some(at) = out[start..].iter().position(|b| parse::control_byte(*b)) {
            let line = 1 + out[..start + at].iter().filter(|b| **b == b'\n').count();
            return Err(ReadError::NotText(SyntaxError::NotText {
                line,
                byte: out[start + at],
            }));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that yields `byte` forever, counting what it gave.
    struct Endless {
        byte: u8,
        given: usize,
    }

    impl Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            buf.fill(self.byte);
            self.given += buf.len();
            Ok(buf.len())
        }
    }

    #[test]
    fn an_endless_stream_of_zeros_stops_at_its_first_chunk() {
        let mut zero = Endless { byte: 0, given: 0 };
        let e = read_bounded(&mut zero).unwrap_err();
        assert_eq!(
            e,
            ReadError::NotText(SyntaxError::NotText { line: 1, byte: 0 })
        );
        assert!(zero.given <= CHUNK, "read {} bytes", zero.given);
    }

    #[test]
    fn an_endless_stream_of_text_stops_at_the_limit() {
        let mut text = Endless {
            byte: b'a',
            given: 0,
        };
        assert_eq!(read_bounded(&mut text).unwrap_err(), ReadError::TooLarge);
        assert!(text.given <= MAX_FILE + CHUNK, "read {} bytes", text.given);
        let ok = read_bounded(&b"virtual_server 192.0.2.1 80 {\n}\n"[..]).expect("text");
        assert_eq!(ok.len(), 32);
    }
}
