//! What a chart is made of, in pixels: the few shapes both writers (SVG
//! text, PNG raster) draw, so that the layout is decided once.
//!
//! Contract: coordinates are pixels from the top-left corner, `y` down.
//! Shapes are drawn in order, later ones over earlier ones. A `Text`'s `y`
//! is the middle of its line; its width is at most `text_width`, which the
//! layout uses to make room: both writers keep to it (SVG in a monospace
//! font, the raster with its bitmap font at `font_scale`).
//!
//! Example: `Shape::Text { x: 10.0, y: 20.0, text: "loss".into(), size:
//! 14.0, anchor: Anchor::Start, color: Color::INK }` writes "loss" starting
//! at x = 10, centred on y = 20.

/// An opaque RGB colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Color(pub u8, pub u8, pub u8);

impl Color {
    pub const WHITE: Color = Color(255, 255, 255);
    pub const INK: Color = Color(34, 34, 34);
    pub const GRID: Color = Color(225, 225, 225);
    pub const AXIS: Color = Color(90, 90, 90);

    /// `#rrggbb`.
    pub fn hex(self) -> String {
        format!("#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }
}

/// Where a text's `x` is: its start, middle or end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anchor {
    Start,
    Middle,
    End,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    /// A filled axis-aligned rectangle.
    Rect {
        x: f64,
        y: f64,
        w: f64,
        h: f64,
        fill: Color,
    },
    /// A straight line of `width` pixels.
    Line {
        from: (f64, f64),
        to: (f64, f64),
        color: Color,
        width: f64,
    },
    /// One run's values in one panel: polylines (a gap, a `null` value,
    /// splits it), drawn as one shape.
    Series {
        parts: Vec<Vec<(f64, f64)>>,
        color: Color,
        width: f64,
    },
    /// A filled circle (a point's marker).
    Dot {
        at: (f64, f64),
        r: f64,
        color: Color,
    },
    Text {
        x: f64,
        y: f64,
        text: String,
        size: f64,
        anchor: Anchor,
        color: Color,
    },
}

/// A whole picture.
#[derive(Clone, Debug, PartialEq)]
pub struct Scene {
    pub width: u32,
    pub height: u32,
    pub shapes: Vec<Shape>,
}

/// The width the layout reserves for `text` at `size`: the wider of a
/// monospace font's (SVG) and the bitmap font's (PNG).
pub fn text_width(text: &str, size: f64) -> f64 {
    let cell = (0.6 * size).max(f64::from(super::font::CELL_W * font_scale(size)));
    text.chars().count() as f64 * cell
}

/// The whole-number scale the raster draws the bitmap font at for `size`.
pub fn font_scale(size: f64) -> u32 {
    (size / 10.0).round().max(1.0) as u32
}
