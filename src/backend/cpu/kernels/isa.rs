//! The instruction-set tier of the low-precision kernels (`bf16_gemm`),
//! picked once per process from what the CPU and the operating system
//! offer, or forced with the environment variable `TFC_ISA`.
//!
//! Contract: the tiers are ordered `Portable < Avx512 < Amx`. `Portable`
//! runs anywhere; `Avx512` needs AVX-512 F, BW, VL, DQ and AVX512_BF16
//! (`vdpbf16ps`); `Amx` needs those too, the AMX-BF16, AMX-TILE and
//! AMX-INT8 bits of CPUID leaf 7 (EDX bits 22, 24, 25), the tile state
//! enabled by the OS in XCR0 (bits 17 and 18), and, on Linux, the tile
//! data granted to this process (`arch_prctl(ARCH_REQ_XCOMP_PERM,
//! XFEATURE_XTILEDATA)`, asked once, here, before any AMX instruction runs:
//! without it the first tile instruction raises SIGILL). [`chosen`] is
//! `TFC_ISA` (`portable`, `avx512` or `amx`, any case; empty counts as
//! unset) when set, an error when that value is unknown or the machine
//! lacks what it needs, else the best tier available — but `Portable` when
//! `TFC_NO_AVX512` is set, as module `simd` runs its portable paths then.
//! Detection runs once; later calls read a `OnceLock`. Off x86_64 only
//! `Portable` exists.
//!
//! Example: on a Sapphire Rapids core under Linux, [`available`] is
//! `[Portable, Avx512, Amx]` and [`active`] is `Amx`; with
//! `TFC_ISA=avx512` it is `Avx512`, and with `TFC_ISA=amx` on an Ice Lake
//! [`chosen`] is `Err("TFC_ISA=amx: this CPU has no AMX-BF16 tiles (CPUID
//! leaf 7 EDX bit 22)")` and [`active`] falls back to `Portable`.

use std::sync::OnceLock;

/// An instruction-set tier of the low-precision kernels, weakest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Plain code: bf16 widened to f32, summed with f32 multiply-adds.
    Portable,
    /// AVX-512 with `vdpbf16ps` (pairs of bf16 products into f32).
    Avx512,
    /// AMX tiles with `tdpbf16ps`.
    Amx,
}

impl Isa {
    /// Every tier, weakest first.
    pub const ALL: [Isa; 3] = [Isa::Portable, Isa::Avx512, Isa::Amx];

    /// The tier's name, as `TFC_ISA` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Avx512 => "avx512",
            Isa::Amx => "amx",
        }
    }
}

/// What the CPU and the operating system offer the kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Features {
    pub avx512f: bool,
    pub avx512bw: bool,
    pub avx512vl: bool,
    pub avx512dq: bool,
    pub avx512_bf16: bool,
    pub avx512_vnni: bool,
    pub avx512_fp16: bool,
    pub amx_tile: bool,
    pub amx_bf16: bool,
    pub amx_int8: bool,
    /// The OS enables the tile state (XCR0 bits 17 and 18).
    pub os_tile_state: bool,
    /// The OS granted this process the tile data (Linux's
    /// `ARCH_REQ_XCOMP_PERM`); asked only when the CPU and XCR0 allow it.
    pub tile_permission: bool,
}

impl Features {
    /// This machine's features, detected once (the tile data request
    /// included).
    pub fn detected() -> &'static Features {
        static FEATURES: OnceLock<Features> = OnceLock::new();
        FEATURES.get_or_init(detect)
    }

    /// Why `isa` cannot run here (the first thing missing), or `None`.
    pub fn lacks(&self, isa: Isa) -> Option<&'static str> {
        let avx512 = [
            (self.avx512f, "this CPU has no AVX-512F"),
            (self.avx512bw, "this CPU has no AVX-512BW"),
            (self.avx512vl, "this CPU has no AVX-512VL"),
            (self.avx512dq, "this CPU has no AVX-512DQ"),
            (self.avx512_bf16, "this CPU has no AVX512_BF16 (vdpbf16ps)"),
        ];
        let amx = [
            (self.amx_bf16, "this CPU has no AMX-BF16 tiles (CPUID leaf 7 EDX bit 22)"),
            (self.amx_tile, "this CPU has no AMX-TILE (CPUID leaf 7 EDX bit 24)"),
            (self.amx_int8, "this CPU has no AMX-INT8 (CPUID leaf 7 EDX bit 25)"),
            (self.os_tile_state, "the OS does not enable the AMX tile state (XCR0 bits 17 and 18)"),
            (
                self.tile_permission,
                "the OS refused the AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)",
            ),
        ];
        let needs: &[&[(bool, &'static str)]] = match isa {
            Isa::Portable => &[],
            Isa::Avx512 => &[&avx512],
            Isa::Amx => &[&avx512, &amx],
        };
        needs.iter().flat_map(|n| n.iter()).find(|(has, _)| !has).map(|&(_, why)| why)
    }

    /// The tiers these features run, weakest first.
    pub fn tiers(&self) -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|&isa| self.lacks(isa).is_none()).collect()
    }
}

/// The tiers this CPU and OS can run, weakest first (`Portable` always).
pub fn available() -> Vec<Isa> {
    Features::detected().tiers()
}

/// The tier the kernels use (see the module docs): `TFC_ISA` when set,
/// else the best available. Computed once.
pub fn chosen() -> Result<Isa, String> {
    static CHOSEN: OnceLock<Result<Isa, String>> = OnceLock::new();
    CHOSEN
        .get_or_init(|| {
            let forced = std::env::var("TFC_ISA").ok();
            let no_avx512 = std::env::var_os("TFC_NO_AVX512").is_some();
            choose(forced.as_deref(), no_avx512, Features::detected())
        })
        .clone()
}

/// [`chosen`], or `Portable` when it is an error (the CLI reports the error
/// at startup).
pub fn active() -> Isa {
    static ACTIVE: OnceLock<Isa> = OnceLock::new();
    *ACTIVE.get_or_init(|| chosen().unwrap_or(Isa::Portable))
}

/// One line for `tfc --version --verbose`: the detected features and the
/// chosen tier.
pub fn describe() -> String {
    let f = Features::detected();
    let flags = [
        ("avx512f", f.avx512f),
        ("avx512bw", f.avx512bw),
        ("avx512_bf16", f.avx512_bf16),
        ("avx512_vnni", f.avx512_vnni),
        ("avx512_fp16", f.avx512_fp16),
        ("amx_tile", f.amx_tile),
        ("amx_bf16", f.amx_bf16),
        ("amx_int8", f.amx_int8),
    ];
    let has: Vec<&str> = flags.iter().filter(|(_, on)| *on).map(|(name, _)| *name).collect();
    let lacks: Vec<&str> = flags.iter().filter(|(_, on)| !*on).map(|(name, _)| *name).collect();
    let tiles = match (f.amx_tile, f.os_tile_state, f.tile_permission) {
        (false, _, _) => "none",
        (true, false, _) => "not enabled by the OS",
        (true, true, false) => "refused by the OS",
        (true, true, true) => "granted",
    };
    let tier = match chosen() {
        Ok(isa) => isa.name().to_string(),
        Err(e) => format!("portable ({e})"),
    };
    format!(
        "cpu features: {} (lacks: {}); amx tile state: {tiles}; low-precision kernels: {tier}",
        if has.is_empty() { "none".to_string() } else { has.join(" ") },
        if lacks.is_empty() { "none".to_string() } else { lacks.join(" ") },
    )
}

/// The tier for a `TFC_ISA` value (`forced`) and `TFC_NO_AVX512`, on a
/// machine with `features` (a pure function, for the tests).
fn choose(forced: Option<&str>, no_avx512: bool, features: &Features) -> Result<Isa, String> {
    let forced = forced.map(str::trim).filter(|v| !v.is_empty());
    let Some(value) = forced else {
        let best = features.tiers().into_iter().max().unwrap_or(Isa::Portable);
        return Ok(if no_avx512 { Isa::Portable } else { best });
    };
    let Some(isa) = Isa::ALL.into_iter().find(|isa| isa.name().eq_ignore_ascii_case(value)) else {
        return Err(format!("TFC_ISA={value}: unknown instruction set (expected portable, avx512 or amx)"));
    };
    match features.lacks(isa) {
        None => Ok(isa),
        Some(why) => Err(format!("TFC_ISA={value}: {why}")),
    }
}

/// Reads CPUID and XCR0, and asks Linux for the tile data when the CPU and
/// XCR0 have tiles.
#[cfg(target_arch = "x86_64")]
fn detect() -> Features {
    use std::arch::is_x86_feature_detected as has;
    use std::arch::x86_64::__cpuid_count;
    // CPUID exists on every x86_64 CPU; leaf 0 gives the highest leaf, and
    // leaf 7 is read only when it exists.
    let max_leaf = __cpuid_count(0, 0).eax;
    let leaf7_edx = if max_leaf >= 7 { __cpuid_count(7, 0).edx } else { 0 };
    let bit = |n: u32| leaf7_edx >> n & 1 == 1;
    let (amx_bf16, amx_tile, amx_int8) = (bit(22), bit(24), bit(25));
    let osxsave = __cpuid_count(1, 0).ecx >> 27 & 1 == 1;
    // XCR0 may be read only when the OS set CR4.OSXSAVE (else #UD).
    // SAFETY: OSXSAVE checked, so XGETBV exists and is enabled.
    let xcr0 = if osxsave { unsafe { xcr0() } } else { 0 };
    let os_tile_state = xcr0 & (0b11 << 17) == 0b11 << 17;
    let tile_permission = amx_tile && os_tile_state && request_tile_data();
    Features {
        avx512f: has!("avx512f"),
        avx512bw: has!("avx512bw"),
        avx512vl: has!("avx512vl"),
        avx512dq: has!("avx512dq"),
        avx512_bf16: has!("avx512bf16"),
        avx512_vnni: has!("avx512vnni"),
        avx512_fp16: has!("avx512fp16"),
        amx_tile,
        amx_bf16,
        amx_int8,
        os_tile_state,
        tile_permission,
    }
}

/// Off x86_64 there is nothing to detect.
#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Features {
    Features::default()
}

/// The OS's extended-state mask, XCR0.
///
/// # Safety
/// The CPU must have OSXSAVE set (CPUID leaf 1 ECX bit 27).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "xsave")]
unsafe fn xcr0() -> u64 {
    // SAFETY: the caller checked OSXSAVE.
    unsafe { std::arch::x86_64::_xgetbv(0) }
}

/// Asks Linux to let this process use the AMX tile data; true when granted
/// (granting is per process and permanent, so asking twice is harmless).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn request_tile_data() -> bool {
    /// `arch_prctl` requests from `asm/prctl.h` and the tile data's
    /// feature number.
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: a plain system call with integer arguments; it touches no
    // memory of ours.
    unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 }
}

/// Elsewhere the tile data is not asked for, so AMX is not used.
#[cfg(all(target_arch = "x86_64", not(target_os = "linux")))]
fn request_tile_data() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Sapphire Rapids core with everything granted.
    fn all() -> Features {
        Features {
            avx512f: true,
            avx512bw: true,
            avx512vl: true,
            avx512dq: true,
            avx512_bf16: true,
            avx512_vnni: true,
            avx512_fp16: true,
            amx_tile: true,
            amx_bf16: true,
            amx_int8: true,
            os_tile_state: true,
            tile_permission: true,
        }
    }

    #[test]
    fn the_best_tier_is_chosen_unless_forced() {
        let f = all();
        assert_eq!(f.tiers(), Isa::ALL.to_vec());
        assert_eq!(choose(None, false, &f), Ok(Isa::Amx));
        assert_eq!(choose(Some(""), false, &f), Ok(Isa::Amx));
        assert_eq!(choose(None, true, &f), Ok(Isa::Portable));
        assert_eq!(choose(Some("avx512"), false, &f), Ok(Isa::Avx512));
        assert_eq!(choose(Some("AMX"), true, &f), Ok(Isa::Amx));
        assert_eq!(choose(Some("portable"), false, &f), Ok(Isa::Portable));
        let ice_lake = Features { amx_tile: false, amx_bf16: false, amx_int8: false, ..all() };
        assert_eq!(choose(None, false, &ice_lake), Ok(Isa::Avx512));
        let skylake = Features { avx512_bf16: false, ..ice_lake };
        assert_eq!(skylake.tiers(), vec![Isa::Portable]);
        assert_eq!(choose(None, false, &Features::default()), Ok(Isa::Portable));
    }

    #[test]
    fn unknown_or_unavailable_tiers_are_errors_that_say_why() {
        let err = choose(Some("avx2"), false, &all()).unwrap_err();
        assert!(err.contains("TFC_ISA=avx2") && err.contains("unknown"), "{err}");
        let ice_lake = Features { amx_tile: false, amx_bf16: false, amx_int8: false, ..all() };
        assert_eq!(
            choose(Some("amx"), false, &ice_lake),
            Err("TFC_ISA=amx: this CPU has no AMX-BF16 tiles (CPUID leaf 7 EDX bit 22)".to_string())
        );
        let refused = Features { tile_permission: false, ..all() };
        assert!(choose(Some("amx"), false, &refused).unwrap_err().contains("ARCH_REQ_XCOMP_PERM"));
        let old_kernel = Features { os_tile_state: false, tile_permission: false, ..all() };
        assert!(choose(Some("amx"), false, &old_kernel).unwrap_err().contains("XCR0"));
        let no_bf16 = Features { avx512_bf16: false, ..all() };
        assert!(choose(Some("avx512"), false, &no_bf16).unwrap_err().contains("AVX512_BF16"));
        assert!(choose(Some("amx"), false, &no_bf16).unwrap_err().contains("AVX512_BF16"));
    }

    #[test]
    fn this_machine_has_a_consistent_tier() {
        let tiers = available();
        assert_eq!(tiers[0], Isa::Portable);
        assert!(tiers.windows(2).all(|w| w[0] < w[1]));
        assert!(tiers.contains(&active()));
        let line = describe();
        assert!(line.contains("low-precision kernels:"), "{line}");
        eprintln!("{line}");
    }
}
