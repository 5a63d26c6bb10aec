//! The UTF-8 check of a whole body: a request the layer reads, an inner answer it reads whole,
//! one line of an event stream. JSON text and event streams are UTF-8 (RFC 8259 §8.1, the
//! HTML event-stream grammar), so a body that is not is refused wherever the bad byte stands.
//!
//! The check is `simdutf8`'s, which takes the CPU's vector instructions when it has them
//! (chosen once, at run time) and the standard library's reading of UTF-8 otherwise: the same
//! verdict as [`std::str::from_utf8`] for every input, at a fraction of the cost per byte on a
//! large body (see `docs/benchmarks.md`, "UTF-8 checks").

/// `bytes` as text, or `None` when they are not UTF-8.
pub(crate) fn text(bytes: &[u8]) -> Option<&str> {
    simdutf8::basic::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::text;

    /// The verdict is the standard library's, on the inputs where vector code and a byte loop
    /// part ways: a bad byte in each position of a vector's width, sequences cut at the end,
    /// overlong forms, surrogates, and code points past U+10FFFF.
    #[test]
    fn the_verdict_is_the_standard_librarys() {
        let bad: [&[u8]; 9] = [
            b"\xff",
            b"\xc0\x80",
            b"\xe0\x80\x80",
            b"\xed\xa0\x80",
            b"\xf4\x90\x80\x80",
            b"\xc3",
            b"\xe2\x82",
            b"\x80",
            b"\xf8\x88\x80\x80\x80",
        ];
        let good: [&[u8]; 4] = ["é".as_bytes(), "€".as_bytes(), "😀".as_bytes(), b"\x7f"];
        for width in [0usize, 1, 15, 16, 31, 32, 63, 64, 65, 200] {
            for piece in bad.iter().chain(good.iter()) {
                for at in [0, width / 2, width] {
                    let mut body = vec![b'a'; width];
                    body.splice(at..at, piece.iter().copied());
                    assert_eq!(
                        text(&body),
                        std::str::from_utf8(&body).ok(),
                        "{piece:?} at {at} of {width}"
                    );
                }
            }
        }
    }
}
