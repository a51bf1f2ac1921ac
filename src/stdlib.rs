//! The standard library's `.tfl` sources, embedded in the binary so a
//! program never depends on files next to the executable.

/// Every std module: its dotted name and source text.
pub const MODULES: &[(&str, &str)] = &[
    ("std.math", include_str!("../std/math.tfl")),
    ("std.init", include_str!("../std/init.tfl")),
    ("std.nn", include_str!("../std/nn.tfl")),
    ("std.loss", include_str!("../std/loss.tfl")),
    ("std.optim", include_str!("../std/optim.tfl")),
    ("std.metrics", include_str!("../std/metrics.tfl")),
    ("std.augment", include_str!("../std/augment.tfl")),
];

/// The source of a std module such as `std.math`.
pub fn source(module: &str) -> Option<&'static str> {
    MODULES.iter().find(|(name, _)| *name == module).map(|(_, src)| *src)
}
