//! A `Scene` drawn into RGB pixels, for the PNG writer.
//!
//! Contract: a white canvas of the scene's size; rectangles snap to whole
//! pixels (the chart's frame and grid are one pixel wide, so they stay
//! sharp); lines, series and dots are anti-aliased by coverage — a pixel's
//! share of the stroke, estimated from the distance of its centre to the
//! stroke's centre line — and a series is blended once, with the largest
//! coverage any of its segments gives a pixel, so that its joints do not
//! darken; text uses the bitmap font (`font.rs`) at a whole-number scale of
//! about a tenth of its size (`scene::font_scale`). Shapes outside the canvas are clipped.
//!
//! Example: `draw(&scene)` gives `3 * width * height` bytes, rows top first.

use super::font::{glyph, CELL_H, CELL_W};
use super::scene::{font_scale, Anchor, Color, Scene, Shape};

struct Canvas {
    w: usize,
    h: usize,
    rgb: Vec<u8>,
}

pub fn draw(scene: &Scene) -> Vec<u8> {
    let (w, h) = (scene.width as usize, scene.height as usize);
    let mut c = Canvas { w, h, rgb: vec![255; 3 * w * h] };
    for shape in &scene.shapes {
        match shape {
            Shape::Rect { x, y, w, h, fill } => c.rect(*x, *y, *w, *h, *fill),
            Shape::Line { from, to, color, width } => c.stroke(&[vec![*from, *to]], *width, *color),
            Shape::Series { parts, color, width } => c.stroke(parts, *width, *color),
            Shape::Dot { at, r, color } => c.dot(*at, *r, *color),
            Shape::Text { x, y, text, size, anchor, color } => c.text(*x, *y, text, *size, *anchor, *color),
        }
    }
    c.rgb
}

impl Canvas {
    /// Mixes `color` into pixel (x, y) with opacity `a`.
    fn blend(&mut self, x: usize, y: usize, color: Color, a: f64) {
        let i = 3 * (y * self.w + x);
        for (k, v) in [color.0, color.1, color.2].into_iter().enumerate() {
            let old = f64::from(self.rgb[i + k]);
            self.rgb[i + k] = (old + (f64::from(v) - old) * a.clamp(0.0, 1.0)).round() as u8;
        }
    }

    /// The pixel ranges `[lo, hi)` that the box `x0..x1, y0..y1` touches.
    fn clip(&self, x0: f64, y0: f64, x1: f64, y1: f64) -> (usize, usize, usize, usize) {
        let cx = |v: f64| v.clamp(0.0, self.w as f64) as usize;
        let cy = |v: f64| v.clamp(0.0, self.h as f64) as usize;
        (cx(x0.floor()), cy(y0.floor()), cx(x1.ceil()), cy(y1.ceil()))
    }

    fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: Color) {
        let (x0, y0, x1, y1) = self.clip(x.round(), y.round(), (x + w).round(), (y + h).round());
        for py in y0..y1 {
            for px in x0..x1 {
                self.blend(px, py, fill, 1.0);
            }
        }
    }

    /// Polylines of `width` pixels, blended once with each pixel's largest
    /// coverage.
    fn stroke(&mut self, parts: &[Vec<(f64, f64)>], width: f64, color: Color) {
        let half = width / 2.0;
        let all = parts.iter().flatten();
        let (mut bx0, mut by0, mut bx1, mut by1) = (f64::MAX, f64::MAX, f64::MIN, f64::MIN);
        for (x, y) in all {
            (bx0, by0, bx1, by1) = (bx0.min(*x), by0.min(*y), bx1.max(*x), by1.max(*y));
        }
        let (x0, y0, x1, y1) = self.clip(bx0 - half - 1.0, by0 - half - 1.0, bx1 + half + 1.0, by1 + half + 1.0);
        if x0 >= x1 || y0 >= y1 {
            return;
        }
        let bw = x1 - x0;
        let mut cover = vec![0f64; bw * (y1 - y0)];
        for part in parts {
            // A lone point still shows, as a dot of the stroke's width.
            let segments: Vec<((f64, f64), (f64, f64))> = match part.len() {
                1 => vec![(part[0], part[0])],
                _ => part.windows(2).map(|s| (s[0], s[1])).collect(),
            };
            for (a, b) in segments {
                let (sx0, sy0, sx1, sy1) = self.clip(
                    a.0.min(b.0) - half - 1.0,
                    a.1.min(b.1) - half - 1.0,
                    a.0.max(b.0) + half + 1.0,
                    a.1.max(b.1) + half + 1.0,
                );
                for py in sy0.max(y0)..sy1.min(y1) {
                    for px in sx0.max(x0)..sx1.min(x1) {
                        let d = distance_to_segment((px as f64 + 0.5, py as f64 + 0.5), a, b);
                        let c = &mut cover[(py - y0) * bw + (px - x0)];
                        *c = c.max(half + 0.5 - d);
                    }
                }
            }
        }
        for py in y0..y1 {
            for px in x0..x1 {
                let a = cover[(py - y0) * bw + (px - x0)];
                if a > 0.0 {
                    self.blend(px, py, color, a);
                }
            }
        }
    }

    fn dot(&mut self, at: (f64, f64), r: f64, color: Color) {
        let (x0, y0, x1, y1) = self.clip(at.0 - r - 1.0, at.1 - r - 1.0, at.0 + r + 1.0, at.1 + r + 1.0);
        for py in y0..y1 {
            for px in x0..x1 {
                let d = ((px as f64 + 0.5 - at.0).powi(2) + (py as f64 + 0.5 - at.1).powi(2)).sqrt();
                let a = r + 0.5 - d;
                if a > 0.0 {
                    self.blend(px, py, color, a);
                }
            }
        }
    }

    fn text(&mut self, x: f64, y: f64, text: &str, size: f64, anchor: Anchor, color: Color) {
        let scale = font_scale(size);
        let n = text.chars().count() as u32;
        // The cells' width without the last one's blank column.
        let width = f64::from((n * CELL_W).saturating_sub(1) * scale);
        let left = match anchor {
            Anchor::Start => x,
            Anchor::Middle => x - width / 2.0,
            Anchor::End => x - width,
        }
        .round();
        let top = (y - f64::from(CELL_H * scale) / 2.0).round();
        for (i, c) in text.chars().enumerate() {
            let cell = left + f64::from(i as u32 * CELL_W * scale);
            for (row, bits) in glyph(c).iter().enumerate() {
                for col in 0..5u32 {
                    if bits & (0b10000 >> col) != 0 {
                        let s = f64::from(scale);
                        let (px, py) = (cell + f64::from(col) * s, top + row as f64 * s);
                        self.rect(px, py, s, s, color);
                    }
                }
            }
        }
    }
}

/// The distance from `p` to the segment `a`–`b`.
fn distance_to_segment(p: (f64, f64), a: (f64, f64), b: (f64, f64)) -> f64 {
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    let len2 = dx * dx + dy * dy;
    let t = if len2 == 0.0 { 0.0 } else { (((p.0 - a.0) * dx + (p.1 - a.1) * dy) / len2).clamp(0.0, 1.0) };
    let (qx, qy) = (a.0 + t * dx, a.1 + t * dy);
    ((p.0 - qx).powi(2) + (p.1 - qy).powi(2)).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pixel(rgb: &[u8], w: usize, x: usize, y: usize) -> [u8; 3] {
        let i = 3 * (y * w + x);
        [rgb[i], rgb[i + 1], rgb[i + 2]]
    }

    #[test]
    fn strokes_are_solid_on_the_line_and_soft_at_its_edge() {
        let red = Color(255, 0, 0);
        let scene = Scene {
            width: 20,
            height: 10,
            shapes: vec![Shape::Series {
                parts: vec![vec![(0.0, 5.3), (10.0, 5.3), (20.0, 5.3)]],
                color: red,
                width: 2.0,
            }],
        };
        let rgb = draw(&scene);
        // Rows 4.3 to 6.3 are covered: row 5 wholly, rows 4 and 6 in part.
        assert_eq!(pixel(&rgb, 20, 10, 5), [255, 0, 0], "on the line");
        let edge = pixel(&rgb, 20, 10, 6);
        assert!(edge[1] > 0 && edge[1] < 255, "partly covered: {edge:?}");
        assert_eq!(pixel(&rgb, 20, 10, 0), [255, 255, 255], "far from it");
    }

    #[test]
    fn text_draws_its_glyphs_and_shapes_off_the_canvas_are_clipped() {
        let scene = Scene {
            width: 30,
            height: 12,
            shapes: vec![
                Shape::Text { x: 1.0, y: 6.0, text: "1".into(), size: 10.0, anchor: Anchor::Start, color: Color::INK },
                Shape::Dot { at: (-50.0, 400.0), r: 3.0, color: Color::INK },
                Shape::Rect { x: 25.0, y: -5.0, w: 100.0, h: 3.0, fill: Color::INK },
            ],
        };
        let rgb = draw(&scene);
        let inked = (0..30 * 12).filter(|i| rgb[3 * i] < 128).count();
        // A `1` has 10 set pixels; no other ink.
        assert_eq!(inked, 10);
    }
}
