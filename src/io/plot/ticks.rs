//! An axis: its range, linear or logarithmic, and tick positions at round
//! numbers with their labels.
//!
//! Contract: `Axis::new(lo, hi, log)` covers `[lo, hi]` (a range of one
//! value is widened so that it has a height); `ticks` are between 3 and
//! about 10 values inside the range, at multiples of 1, 2 or 5 times a
//! power of ten (linear) or at powers of ten (log; with fewer than two of
//! them inside, at 1, 2 and 5 times them, and over less than a factor of
//! five, the linear ticks), and `label` writes a tick
//! without noise digits (`0.25`, `1e-05`, `20000`). `frac` maps a value to
//! [0, 1] along the axis.
//!
//! Example: `Axis::new(0.0, 24.0, false).ticks()` is `[0, 5, 10, 15, 20]`.

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Axis {
    pub lo: f64,
    pub hi: f64,
    pub log: bool,
}

impl Axis {
    /// An axis over `[lo, hi]`; `log` needs `lo > 0`.
    pub fn new(lo: f64, hi: f64, log: bool) -> Axis {
        let (mut lo, mut hi) = (lo.min(hi), lo.max(hi));
        if log {
            if hi / lo < 1.5 {
                (lo, hi) = (lo / 1.5, hi * 1.5);
            }
        } else if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
            let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
            (lo, hi) = (lo - pad, hi + pad);
        }
        Axis { lo, hi, log }
    }

    /// The same axis with `share` of its span added at both ends, so that
    /// no point lies on the frame.
    pub fn padded(self, share: f64) -> Axis {
        if self.log {
            let pad = (self.hi / self.lo).powf(share);
            Axis { lo: self.lo / pad, hi: self.hi * pad, log: true }
        } else {
            let pad = (self.hi - self.lo) * share;
            Axis { lo: self.lo - pad, hi: self.hi + pad, log: false }
        }
    }

    /// Where `v` lies between `lo` (0) and `hi` (1).
    pub fn frac(&self, v: f64) -> f64 {
        if self.log {
            (v.ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }

    /// The tick values inside the range, ascending.
    pub fn ticks(&self) -> Vec<f64> {
        // Ranges at the ends of f64 (padding that overflowed, a step that
        // underflows) get no ticks rather than an endless or NaN list.
        if !(self.lo.is_finite() && self.hi.is_finite() && self.lo < self.hi) {
            return Vec::new();
        }
        if self.log {
            let (a, b) = (self.lo.log10().ceil() as i32, self.hi.log10().floor() as i32);
            let decades: Vec<f64> = (a..=b).map(|k| 10f64.powi(k)).collect();
            // Over many decades, every few; within one, the 2s and 5s too.
            let every = (decades.len() / 8 + 1).max(1);
            if decades.len() >= 2 {
                return decades.into_iter().step_by(every).collect();
            }
            let mut out = Vec::new();
            for k in (a - 1)..=b {
                for m in [1.0, 2.0, 5.0] {
                    let v = m * 10f64.powi(k);
                    if v >= self.lo && v <= self.hi {
                        out.push(v);
                    }
                }
            }
            if out.len() >= 2 {
                return out;
            }
            // Less than a factor of 5: the linear ticks, placed on the log scale.
        }
        let step = self.step();
        if !(step > 0.0 && step.is_finite()) {
            return Vec::new();
        }
        // A tick on an end stays despite rounding (3.3 / 0.1 = 32.99…).
        let first = (self.lo / step - 1e-9).ceil() as i64;
        let last = (self.hi / step + 1e-9).floor() as i64;
        if last.saturating_sub(first) > 100 {
            return Vec::new();
        }
        (first..=last).map(|i| i as f64 * step).collect()
    }

    /// The distance between linear ticks: 1, 2 or 5 times a power of ten,
    /// giving 4 to 10 ticks.
    fn step(&self) -> f64 {
        let rough = (self.hi - self.lo) / 5.0;
        let power = 10f64.powf(rough.log10().floor());
        let m = rough / power;
        let nice = if m < 1.5 {
            1.0
        } else if m < 3.5 {
            2.0
        } else if m < 7.5 {
            5.0
        } else {
            10.0
        };
        nice * power
    }

    /// A tick's label, with as many decimals as the ticks' spacing needs.
    pub fn label(&self, v: f64) -> String {
        if v == 0.0 {
            return "0".into();
        }
        let a = v.abs();
        if !(1e-4..1e6).contains(&a) {
            return exponent(v);
        }
        if self.log {
            // Log ticks are not evenly spaced: as many digits as the value has.
            let decimals = (-a.log10().floor()).max(0.0) as usize + 3;
            let text = format!("{v:.decimals$}");
            return text.trim_end_matches('0').trim_end_matches('.').to_string();
        }
        let decimals = (-self.step().log10().floor()).max(0.0) as usize;
        format!("{v:.decimals$}")
    }
}

/// `1e-05`, `2.5e+07`: the shortest mantissa, a signed two-digit exponent.
fn exponent(v: f64) -> String {
    let text = format!("{v:e}");
    let (mantissa, exp) = text.split_once('e').unwrap_or((&text, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let mantissa = if mantissa.len() > 5 { format!("{:.2}", v / 10f64.powi(exp)) } else { mantissa.to_string() };
    let mantissa = if mantissa.contains('.') {
        mantissa.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        mantissa
    };
    format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_ticks_are_round_numbers_inside_the_range() {
        assert_eq!(Axis::new(0.0, 24.0, false).ticks(), [0.0, 5.0, 10.0, 15.0, 20.0]);
        let a = Axis::new(0.013, 0.047, false);
        let labels: Vec<String> = a.ticks().iter().map(|t| a.label(*t)).collect();
        assert_eq!(labels, ["0.015", "0.020", "0.025", "0.030", "0.035", "0.040", "0.045"]);
        assert_eq!(Axis::new(3.0, 3.0, false).ticks().len(), 7, "one value gets a height");
    }

    #[test]
    fn log_ticks_are_powers_of_ten() {
        let a = Axis::new(1.6e-5, 2.37, true);
        assert_eq!(a.ticks().iter().map(|t| a.label(*t)).collect::<Vec<_>>(), ["0.0001", "0.001", "0.01", "0.1", "1"]);
        let narrow = Axis::new(0.3, 0.9, true);
        let labels: Vec<String> = narrow.ticks().iter().map(|t| narrow.label(*t)).collect();
        assert_eq!(labels, ["0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9"]);
        assert!(Axis::new(0.15, 0.9, true).ticks().contains(&0.2));
        assert!((a.frac(a.lo)).abs() < 1e-12 && (a.frac(a.hi) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn labels_have_no_noise_digits() {
        let a = Axis::new(0.0, 1.0, false);
        assert_eq!(a.label(0.2 + 0.1 - 0.1), "0.2");
        assert_eq!(a.label(0.0), "0");
        assert_eq!(Axis::new(1e-9, 1e-5, true).label(1e-7), "1e-07");
        assert_eq!(exponent(2.5e7), "2.5e+07");
        assert_eq!(exponent(1.234_567e-9), "1.23e-09");
    }
}
