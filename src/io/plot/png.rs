//! PNG encoding of an 8-bit RGB image: the signature, then the `IHDR`,
//! `IDAT` (zlib-deflated scanlines, each with filter byte 0) and `IEND`
//! chunks, each framed as length, type, data and the CRC-32 of type and
//! data (PNG's own CRC is zlib's: `flate2::Crc`).
//!
//! Contract: `encode(w, h, rgb)` with `rgb.len() == 3 * w * h`, rows top to
//! bottom, gives a complete PNG file that any decoder reads back as the
//! same pixels.
//!
//! Example: `encode(1, 1, &[255, 0, 0])` is a one-pixel red PNG.

use std::io::Write;

pub fn encode(width: u32, height: u32, rgb: &[u8]) -> Vec<u8> {
    debug_assert_eq!(rgb.len(), 3 * width as usize * height as usize);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut header = Vec::with_capacity(13);
    header.extend(width.to_be_bytes());
    header.extend(height.to_be_bytes());
    // Bit depth 8, colour type 2 (RGB), deflate, adaptive filtering, no
    // interlace.
    header.extend([8, 2, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &header);
    let row = 3 * width as usize;
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    for line in rgb.chunks(row.max(1)) {
        // Filter type 0 (none): charts are mostly flat colour, which
        // deflate compresses well as it is.
        let _ = z.write_all(&[0]);
        let _ = z.write_all(line);
    }
    // Writing into a Vec cannot fail.
    let data = z.finish().unwrap_or_default();
    chunk(&mut out, b"IDAT", &data);
    chunk(&mut out, b"IEND", &[]);
    out
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend((data.len() as u32).to_be_bytes());
    out.extend(kind);
    out.extend(data);
    let mut crc = flate2::Crc::new();
    crc.update(kind);
    crc.update(data);
    out.extend(crc.sum().to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn chunks_are_framed_and_the_pixels_inflate_back() {
        let png = encode(2, 1, &[255, 0, 0, 0, 0, 255]);
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        // IHDR: length 13, then its type; its CRC is the well-known one of
        // this header only when computed over type and data.
        assert_eq!(&png[8..16], b"\x00\x00\x00\x0dIHDR");
        let mut crc = flate2::Crc::new();
        crc.update(&png[12..29]);
        assert_eq!(&png[29..33], &crc.sum().to_be_bytes());
        let idat_len = u32::from_be_bytes(png[33..37].try_into().unwrap()) as usize;
        assert_eq!(&png[37..41], b"IDAT");
        let mut raw = Vec::new();
        flate2::read::ZlibDecoder::new(&png[41..41 + idat_len]).read_to_end(&mut raw).unwrap();
        assert_eq!(raw, [0, 255, 0, 0, 0, 0, 255]);
        assert!(png.ends_with(b"\x00\x00\x00\x00IEND\xae\x42\x60\x82"));
    }
}
