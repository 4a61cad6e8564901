//! HotSpot's compressed unsigned integers (UNSIGNED5), the decoder alone: what an nmethod's
//! scopes data is written in.

/// HotSpot's compressed unsigned integers, UNSIGNED5 from Pack200: one to five bytes, base-64
/// digits, least significant first. A byte below 192 is the last; a byte of 192 or more
/// carries six bits and more follow, up to the fifth byte, which is last whatever its value.
/// Each byte's digit is the byte less the count of excluded byte values: none up to JDK 19
/// (JDK 17 `code/compressedStream.cpp`, `CompressedReadStream::read_int_mb`: `sum += b[i] <<
/// 6*i`, with `L = 192` low codes), one since JDK 20 (JDK-8292758,
/// `utilities/unsigned5.hpp`: `X = 1`, `L = 191`, `sum += (b[i] - X) << 6*i`), which keeps
/// the byte 0 out of the stream. Both stop at a byte below `X + L = 192`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Unsigned5 {
    excluded: u8,
}

impl Unsigned5 {
    pub(super) const UP_TO_JDK19: Unsigned5 = Unsigned5 { excluded: 0 };
    pub(super) const SINCE_JDK20: Unsigned5 = Unsigned5 { excluded: 1 };

    pub(super) fn for_major(major: i64) -> Unsigned5 {
        if major >= 20 {
            Self::SINCE_JDK20
        } else {
            Self::UP_TO_JDK19
        }
    }

    /// The number at `*pos` in `buf`, `*pos` moved past it; None when it runs past `buf` or
    /// holds an excluded byte.
    pub(super) fn read(self, buf: &[u8], pos: &mut usize) -> Option<u32> {
        let mut sum = 0u32;
        for i in 0..5 {
            let b = *buf.get(pos.checked_add(i)?)?;
            let digit = u32::from(b.checked_sub(self.excluded)?);
            // The JVM sums in 32 bits: a fifth byte's high bits fall off.
            sum = sum.wrapping_add(digit << (6 * i));
            if b < 192 || i == 4 {
                *pos += i + 1;
                return Some(sum);
            }
        }
        None
    }
}

/// UNSIGNED5 written from its definition (JDK 17 `CompressedWriteStream::write_int_mb`,
/// JDK 20+ `UNSIGNED5::write_uint`): while the rest is not below `L` (and fewer than four
/// bytes were written), write the high code `X + L + (rest - L) % 64` and go on with
/// `(rest - L) / 64`; end with the low code `X + rest`.
#[cfg(test)]
pub(super) fn encode(value: u32, format: Unsigned5) -> Vec<u8> {
    let x = u32::from(format.excluded);
    let l = 256 - 64 - x;
    let mut out = Vec::new();
    let mut rest = value;
    for i in 0..5 {
        if rest < l || i == 4 {
            out.push(u8::try_from(x + rest).expect("a byte"));
            break;
        }
        rest -= l;
        out.push(u8::try_from(x + l + rest % 64).expect("a byte"));
        rest >>= 6;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(bytes: &[u8], format: Unsigned5) -> Option<Vec<u32>> {
        let mut pos = 0;
        let mut out = Vec::new();
        while pos < bytes.len() {
            out.push(format.read(bytes, &mut pos)?);
        }
        Some(out)
    }

    #[test]
    fn unsigned5_as_jdk17_writes_it() {
        let f = Unsigned5::UP_TO_JDK19;
        // One byte up to 191; 192 + 64 * (the rest) after that (L = 192, H = 64, X = 0).
        let cases: &[(&[u8], u32)] = &[
            (&[0x00], 0),
            (&[0x05], 5),
            (&[0xbf], 191),
            (&[0xc0, 0x00], 192),
            (&[0xff, 0x00], 255),
            (&[0xc0, 0x01], 256),
            (&[0xff, 0xbf], 255 + 191 * 64),
            (&[0xc0, 0xc0, 0x00], 256 + 191 * 64),
            // 255 + 252 * 64 + 252 * 64^2 + 252 * 64^3 + 252 * 64^4
            (&[0xff, 0xfc, 0xfc, 0xfc, 0xfc], u32::MAX),
        ];
        for &(bytes, value) in cases {
            assert_eq!(decode_all(bytes, f), Some(vec![value]), "{bytes:x?}");
            assert_eq!(encode(value, f), bytes, "{value}");
        }
        // The JVM sums in 32 bits: what no writer writes wraps.
        assert_eq!(
            f.read(&[0xff; 5], &mut 0),
            Some((255u64 * (1 + 64 + 64 * 64 + 64 * 64 * 64 + 64 * 64 * 64 * 64)) as u32)
        );
        // Runs past the end: a high byte last.
        assert_eq!(f.read(&[0xc0], &mut 0), None);
        assert_eq!(f.read(&[0x10, 0xc5], &mut 1), None);
        // A fifth byte ends the number whatever its value.
        let mut pos = 0;
        assert_eq!(
            f.read(&[0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0x07], &mut pos),
            Some(192 + (192 << 6) + (192 << 12) + (192 << 18) + (192 << 24))
        );
        assert_eq!(pos, 5);
    }

    #[test]
    fn unsigned5_as_jdk20_writes_it() {
        let f = Unsigned5::SINCE_JDK20;
        // Every digit is one less than its byte (X = 1), so no byte is 0 (L = 191).
        let cases: &[(&[u8], u32)] = &[
            (&[0x01], 0),
            (&[0xbf], 190),
            (&[0xc0, 0x01], 191),
            (&[0xff, 0x01], 254),
            (&[0xc0, 0x02], 255),
        ];
        for &(bytes, value) in cases {
            assert_eq!(decode_all(bytes, f), Some(vec![value]), "{bytes:x?}");
            assert_eq!(encode(value, f), bytes, "{value}");
        }
        assert_eq!(f.read(&[0x00], &mut 0), None, "0 is excluded");
        assert_eq!(f.read(&[0xc0, 0x00], &mut 0), None, "0 is excluded");
    }

    #[test]
    fn unsigned5_round_trips() {
        let mut values: Vec<u32> = (0..70_000).collect();
        for shift in 0..32 {
            let v = 1u32 << shift;
            values.extend([v - 1, v, v + 1]);
        }
        values.extend([
            u32::MAX - 1,
            u32::MAX,
            0x8000_0000,
            0x0208_2080,
            0x0308_207f,
        ]);
        for f in [Unsigned5::UP_TO_JDK19, Unsigned5::SINCE_JDK20] {
            let mut stream = Vec::new();
            for &v in &values {
                let bytes = encode(v, f);
                assert!((1..=5).contains(&bytes.len()));
                stream.extend(bytes);
            }
            assert_eq!(
                decode_all(&stream, f).as_deref(),
                Some(&values[..]),
                "{f:?}"
            );
        }
    }
}
