//! Bytes a page carries packed: gzip, then base64 inside a `<script type=
//! "application/octet-stream">` element (text the browser neither runs nor renders), and the
//! page's script that unpacks them with the browser's own `DecompressionStream` (Chromium 80,
//! Firefox 113, Safari 16.4), so nothing is loaded from elsewhere. The HTML report packs its
//! flame graph and its timeline's events this way (`html.rs`, `timeline_html.rs`): text that
//! repeats itself (an SVG, frame names) shrinks 5–10 times.

use std::io::{self, Write};

/// `bytes` gzipped (level 9: a report is written once and read many times; no file name and
/// no time in the header, so the same input packs to the same text) and base64-encoded.
pub fn pack(bytes: &[u8]) -> io::Result<String> {
    let mut gz = flate2::GzBuilder::new().write(Vec::new(), flate2::Compression::best());
    gz.write_all(bytes)?;
    Ok(base64(&gz.finish()?))
}

/// The element that carries packed bytes; `unpack(id)` in [`UNPACK_SCRIPT`] reads it.
pub fn element(id: &str, packed: &str) -> String {
    format!(
        "<script type=\"application/octet-stream\" id=\"{id}\" data-encoding=\"gzip+base64\">{packed}</script>"
    )
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (RFC 4648), as `atob` reads it.
fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The page's unpacker, defined once before any part that uses it: `unpack(id)` → a promise
/// of the element's bytes (a `Uint8Array`). `reportParts` collects each packed part's promise
/// (drawn, or failed); `reportReady` (set by the page's last script) settles once all have,
/// which is what a test waits for.
pub const UNPACK_SCRIPT: &str = r#"window.reportParts = [];
window.unpack = function (id) {
  if (typeof DecompressionStream !== 'function') {
    return Promise.reject(new Error('this browser cannot unpack the page\'s data (it lacks DecompressionStream: Chromium 80, Firefox 113, Safari 16.4 have it)'));
  }
  var text = atob(document.getElementById(id).textContent);
  var bytes = new Uint8Array(text.length);
  for (var i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
  return new Response(stream).arrayBuffer().then(function (b) { return new Uint8Array(b); });
};"#;

/// The page's last script: `reportReady` settles when every packed part has.
pub const READY_SCRIPT: &str = "window.reportReady = Promise.all(window.reportParts);";

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Read as _;

    use super::*;

    /// The inverse of [`base64`], for tests.
    pub(crate) fn unbase64(text: &str) -> Vec<u8> {
        let value = |c: u8| ALPHABET.iter().position(|&a| a == c).unwrap() as u32;
        let text = text.trim_end_matches('=').as_bytes();
        let mut out = Vec::new();
        for chunk in text.chunks(4) {
            let mut n = 0;
            for (i, &c) in chunk.iter().enumerate() {
                n |= value(c) << (18 - 6 * i);
            }
            let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
            out.extend_from_slice(&bytes[..chunk.len() - 1]);
        }
        out
    }

    /// What a page's element of `id` carries, unpacked as the page's script unpacks it.
    pub(crate) fn unpack(page: &str, id: &str) -> Vec<u8> {
        let open = format!("<script type=\"application/octet-stream\" id=\"{id}\"");
        let at = page
            .find(&open)
            .unwrap_or_else(|| panic!("no element {id}"));
        let body = &page[at..];
        let body = &body[body.find('>').unwrap() + 1..body.find("</script>").unwrap()];
        let mut bytes = Vec::new();
        flate2::read::GzDecoder::new(&unbase64(body)[..])
            .read_to_end(&mut bytes)
            .unwrap();
        bytes
    }

    #[test]
    fn base64_is_rfc_4648s() {
        for (bytes, text) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (b"fooba", "Zm9vYmE="),
            (b"foobar", "Zm9vYmFy"),
            (&[0xfb, 0xff, 0xbf], "+/+/"),
        ] {
            assert_eq!(base64(bytes), text);
            assert_eq!(unbase64(text), bytes);
        }
    }

    #[test]
    fn packed_bytes_unpack_to_themselves_and_pack_alike_each_time() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let packed = pack(&bytes).unwrap();
        assert_eq!(packed, pack(&bytes).unwrap());
        let page = format!("<p>x</p>{}", element("d", &packed));
        assert_eq!(unpack(&page, "d"), bytes);
        assert!(!packed.contains('<') && !packed.contains('&'));
    }
}
