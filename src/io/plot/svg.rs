//! A `Scene` as SVG text.
//!
//! Contract: a standalone SVG 1.1 document (XML declaration, `svg` root with
//! `width`, `height` and `viewBox`) whose elements follow the scene's
//! shapes in order: `rect`, `line`, one `path` per `Series` (each piece a
//! `M … L …` run), `circle`, and `text` in a monospace font with its text
//! escaped. Coordinates have at most two decimals.
//!
//! Example: `Shape::Series { parts: [[(0, 0), (10, 5)]], .. }` is
//! `<path d="M0 0L10 5" fill="none" stroke="#1f77b4" …/>`.

use super::scene::{Anchor, Scene, Shape};
use std::fmt::Write;

pub fn write(scene: &Scene) -> String {
    let (w, h) = (scene.width, scene.height);
    let mut out = String::new();
    out.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\">"
    );
    let _ = writeln!(out, "<rect x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" fill=\"#ffffff\"/>");
    for shape in &scene.shapes {
        match shape {
            Shape::Rect { x, y, w, h, fill } => {
                let _ = writeln!(
                    out,
                    "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>",
                    n(*x),
                    n(*y),
                    n(*w),
                    n(*h),
                    fill.hex()
                );
            }
            Shape::Line { from, to, color, width } => {
                let _ = writeln!(
                    out,
                    "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"{}\" stroke-linecap=\"round\"/>",
                    n(from.0),
                    n(from.1),
                    n(to.0),
                    n(to.1),
                    color.hex(),
                    n(*width)
                );
            }
            Shape::Series { parts, color, width } => {
                let mut d = String::new();
                for part in parts {
                    for (i, (x, y)) in part.iter().enumerate() {
                        let _ = write!(d, "{}{} {}", if i == 0 { 'M' } else { 'L' }, n(*x), n(*y));
                    }
                }
                let _ = writeln!(
                    out,
                    "<path d=\"{d}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" stroke-linejoin=\"round\" stroke-linecap=\"round\"/>",
                    color.hex(),
                    n(*width)
                );
            }
            Shape::Dot { at, r, color } => {
                let _ = writeln!(
                    out,
                    "<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\"/>",
                    n(at.0),
                    n(at.1),
                    n(*r),
                    color.hex()
                );
            }
            Shape::Text { x, y, text, size, anchor, color } => {
                let anchor = match anchor {
                    Anchor::Start => "start",
                    Anchor::Middle => "middle",
                    Anchor::End => "end",
                };
                let _ = writeln!(
                    out,
                    "<text x=\"{}\" y=\"{}\" font-family=\"monospace\" font-size=\"{}\" text-anchor=\"{anchor}\" dominant-baseline=\"central\" fill=\"{}\">{}</text>",
                    n(*x),
                    n(*y),
                    n(*size),
                    color.hex(),
                    escape(text)
                );
            }
        }
    }
    out.push_str("</svg>\n");
    out
}

/// A coordinate with at most two decimals and no trailing zeros.
fn n(v: f64) -> String {
    let text = format!("{v:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".into()
    } else {
        text.to_string()
    }
}

/// Text as XML character data: markup characters escaped, and control
/// characters (which XML 1.0 forbids) replaced.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::scene::Color;
    use super::*;

    #[test]
    fn shapes_become_elements_with_escaped_text() {
        let scene = Scene {
            width: 10,
            height: 20,
            shapes: vec![
                Shape::Series {
                    parts: vec![vec![(0.0, 0.0), (1.5, 2.25)], vec![(3.0, 4.0)]],
                    color: Color(1, 2, 3),
                    width: 2.0,
                },
                Shape::Text {
                    x: 1.0,
                    y: 2.0,
                    text: "a<b & \"c\"\u{7}".into(),
                    size: 12.0,
                    anchor: Anchor::End,
                    color: Color::INK,
                },
            ],
        };
        let svg = write(&scene);
        assert!(svg.contains("viewBox=\"0 0 10 20\""));
        assert!(svg.contains("<path d=\"M0 0L1.5 2.25M3 4\" fill=\"none\" stroke=\"#010203\""), "{svg}");
        assert!(svg.contains(">a&lt;b &amp; &quot;c&quot;\u{fffd}</text>"), "{svg}");
        assert!(svg.ends_with("</svg>\n"));
    }

    #[test]
    fn numbers_are_short() {
        assert_eq!(n(3.0), "3");
        assert_eq!(n(-0.001), "0");
        assert_eq!(n(12.345), "12.35");
    }
}
