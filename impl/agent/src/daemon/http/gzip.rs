//! gzip, as Nomad's agent answers it: Nomad wraps its handlers in gorilla's
//! `CompressHandler` (gzip at Go's default level, 6), which compresses an answer when the
//! request's `Accept-Encoding` names gzip — Go's `net/http` client asks for it unless told
//! not to, Python's `requests` too — and adds `Vary: Accept-Encoding` to every answer.
//!
//! Here the reads of the store are compressed: each answer once, beside its plain copy in
//! the shared-answer cache (`answers.rs`), and the same compressed bytes go to every client
//! that takes gzip; the copy counts against the same budget of unsent bytes. Not
//! compressed: answers under [`MIN_BYTES`], the answers built per request (writes, the
//! agent's own state, a file under `/v1/client/fs/`), and the streams — `/v1/event/stream`
//! as Nomad's (it drops `Content-Encoding` from its stream), a followed log unlike Nomad's
//! (which it flushes through gzip frame by frame); a client decompresses only what says
//! `Content-Encoding: gzip`, so each is read as before.
//!
//! Measured (1,000 running allocations, `/v1/allocations` 1.93 MB, flate2 on miniz_oxide,
//! release build): level 1 makes 115 kB in 2.8 ms, level 3 71 kB in 6.5 ms, level 6 67 kB
//! in 11.4 ms, level 9 67 kB in 15.0 ms; decompressing any of them takes a client 1.1–1.4
//! ms. An answer is compressed once per write and sent to every client that reads it, so
//! the bytes sent weigh more than the time spent once: level 6, Nomad's, sends 42% less
//! than level 1 for 9 ms more per write, and 9 gains nothing.

use flate2::write::GzEncoder;
use flate2::Compression;
use std::io::Write;

/// The compression level: Go's default, Nomad's (see the measurements above).
pub const LEVEL: u32 = 6;

/// Answers smaller than this go plain: a packet or two either way, and a compressed copy
/// to keep for nothing.
pub const MIN_BYTES: usize = 1024;

/// Whether a request's `Accept-Encoding` takes gzip: `gzip` (or `x-gzip`, its old name)
/// among the codings, in any case, with no `q=0` (RFC 9110, 12.5.3). `*` is not read as
/// gzip, as gorilla's handler does not.
pub fn accepted(accept_encoding: Option<&str>) -> bool {
    accept_encoding.is_some_and(|codings| {
        codings.split(',').any(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            let name = parts.next().unwrap_or_default();
            let refused = parts.any(|param| {
                param
                    .split_once('=')
                    .filter(|(key, _)| key.trim().eq_ignore_ascii_case("q"))
                    .and_then(|(_, q)| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (name.eq_ignore_ascii_case("gzip") || name.eq_ignore_ascii_case("x-gzip")) && !refused
        })
    })
}

/// `plain` gzip-compressed at [`LEVEL`], or `None` where that would not be smaller.
pub fn compress(plain: &[u8]) -> Option<Vec<u8>> {
    let mut encoder = GzEncoder::new(Vec::with_capacity(plain.len() / 8), Compression::new(LEVEL));
    encoder
        .write_all(plain)
        .expect("writing to a Vec does not fail");
    let compressed = encoder.finish().expect("writing to a Vec does not fail");
    (compressed.len() < plain.len()).then_some(compressed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn gzip_is_accepted_as_clients_name_it() {
        for taken in [
            "gzip",
            "gzip, deflate",
            "deflate, gzip;q=0.5",
            "GZIP",
            " x-gzip ",
            "br;q=1.0, gzip ; q=0.8",
        ] {
            assert!(accepted(Some(taken)), "{taken:?}");
        }
        for refused in [
            "",
            "deflate",
            "br",
            "identity",
            "gzip;q=0",
            "gzip; q=0.0",
            "*",
        ] {
            assert!(!accepted(Some(refused)), "{refused:?}");
        }
        assert!(!accepted(None));
    }

    #[test]
    fn compressed_bytes_decompress_to_the_answer() {
        let plain = br#"{"ID":"web","Status":"running"}"#.repeat(100);
        let compressed = compress(&plain).expect("repetitive JSON compresses");
        assert!(compressed.len() < plain.len() / 10);
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&compressed[..])
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, plain);
        assert_eq!(compress(b"x"), None, "no gain, no copy");
    }
}
