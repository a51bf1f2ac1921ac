//! Pictures of training logs (`tfc plot`): reading the JSON lines a `log`
//! setting writes (`trainlog.rs`), laying out the chart once as shapes
//! (`chart.rs`, `ticks.rs`, `scene.rs`), and writing those shapes as SVG
//! text (`svg.rs`) or as a PNG rasterized here (`raster.rs`, `font.rs`,
//! `png.rs`), with no drawing library.
//!
//! Contract: `Format::of(path)` picks the output format by the file's
//! extension (`.svg` or `.png`, any case) and `encode` turns a scene into
//! that format's bytes; nothing here writes files (the caller writes them
//! atomically).
//!
//! Example: `Format::Png.encode(&chart(&runs, XAxis::Step, YScale::Auto,
//! "runs").0)` is a PNG file's bytes.

pub mod chart;
pub mod font;
pub mod png;
pub mod raster;
pub mod scene;
pub mod svg;
pub mod ticks;
pub mod trainlog;

pub use chart::{chart, Run, XAxis, YScale};
pub use trainlog::TrainLog;

/// An output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Svg,
    Png,
}

impl Format {
    /// The format `path`'s extension names, if any.
    pub fn of(path: &std::path::Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "svg" => Some(Format::Svg),
            "png" => Some(Format::Png),
            _ => None,
        }
    }

    /// The file's bytes.
    pub fn encode(self, scene: &scene::Scene) -> Vec<u8> {
        match self {
            Format::Svg => svg::write(scene).into_bytes(),
            Format::Png => png::encode(scene.width, scene.height, &raster::draw(scene)),
        }
    }
}
