//! keepalived's `digest` as an http check's `expect_digest`: the page is read whole (to its
//! framed end, at most `MAX_BODY` bytes) and its MD5 compared with the one the operator
//! took from a good server (`genhash`), so a page that answers 200 with the wrong content
//! fails.

use tokio::io::AsyncRead;

use crate::outcome::Failure;
use crate::probe::{Framing, Head, MAX_BODY, contains, dechunk, read_some};

/// Judges a whole body: it contains `expect` (when set) and its MD5 is `want`.
pub(crate) fn judge(body: &[u8], expect: Option<&str>, want: &str) -> Result<(), Failure> {
    if let Some(e) = expect
        && !contains(body, e.as_bytes())
    {
        return Err(Failure::BodyMismatch(e.to_string()));
    }
    let got = md5_hex(body);
    if !got.eq_ignore_ascii_case(want) {
        return Err(Failure::Digest(got));
    }
    Ok(())
}

/// The body in full (starting with `raw`): to its framed end, or EOF, at most [`MAX_BODY`]
/// bytes (a longer one is judged by its first [`MAX_BODY`], and its digest then differs).
pub(crate) async fn whole_body<S: AsyncRead + Unpin>(
    s: &mut S,
    head: &Head,
    mut raw: Vec<u8>,
    chunk: &mut [u8],
) -> Result<Vec<u8>, Failure> {
    loop {
        let (body, complete) = match head.framing {
            Framing::Chunked => dechunk(&raw)?,
            Framing::Length(n) => {
                let take = raw.len().min(n);
                (raw[..take].to_vec(), raw.len() >= n)
            }
            Framing::Eof => (raw.clone(), false),
        };
        if complete || raw.len() >= MAX_BODY {
            return Ok(body);
        }
        let n = read_some(s, chunk).await?;
        if n == 0 {
            return match head.framing {
                Framing::Eof => Ok(body),
                _ => Err(Failure::BadResponse(
                    "connection closed inside the body".into(),
                )),
            };
        }
        raw.extend_from_slice(&chunk[..n]);
    }
}

/// The MD5 digest of `body` as 32 lower-case hex digits (keepalived's `digest`).
pub(crate) fn md5_hex(body: &[u8]) -> String {
    use md5::Digest as _;
    let d = md5::Md5::digest(body);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_as_keepalived_s_genhash_writes_it() {
        // `genhash` of an empty page, and of "hello\n".
        assert_eq!(md5_hex(b""), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(md5_hex(b"hello\n"), "b1946ac92492d2347c6235b4d2611184");
    }

    #[test]
    fn a_body_is_judged_by_substring_then_digest() {
        let hello = "b1946ac92492d2347c6235b4d2611184";
        assert_eq!(judge(b"hello\n", None, hello), Ok(()));
        assert_eq!(
            judge(b"hello\n", Some("hell"), &hello.to_uppercase()),
            Ok(())
        );
        assert_eq!(
            judge(b"hello\n", Some("bye"), hello),
            Err(Failure::BodyMismatch("bye".into()))
        );
        assert_eq!(
            judge(b"", None, hello),
            Err(Failure::Digest("d41d8cd98f00b204e9800998ecf8427e".into()))
        );
    }
}
