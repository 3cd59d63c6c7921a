//! The effective policy (spec.capacity with defaults, from the generator's API types):
//! whether it can be evaluated, and a fingerprint that changes when any field does.

pub use celld_api::defaults::CapacityPolicy as Policy;
use celld_api::defaults::{self as d, Bounds};

fn within(v: i32, b: Bounds<i32>) -> bool {
    (b.min..=b.max).contains(&v)
}

/// Rule E1 (valid policy): every field in its CRD range and the pairs in order. The CRD
/// and validation refuse anything else; this guards a spec written around them.
pub fn valid(p: &Policy) -> bool {
    within(p.min_members, d::MEMBERS_BOUNDS)
        && within(p.max_members, d::MEMBERS_BOUNDS)
        && p.min_members <= p.max_members
        && within(p.scale_out_step, d::SCALE_OUT_STEP_BOUNDS)
        && within(p.sample_interval_seconds, d::SAMPLE_INTERVAL_SECONDS_BOUNDS)
        && within(p.max_age_seconds, d::MAX_AGE_SECONDS_BOUNDS)
        && p.sample_interval_seconds <= p.max_age_seconds
        && within(p.min_window_seconds, d::MIN_WINDOW_SECONDS_BOUNDS)
        && within(p.max_window_seconds, d::MAX_WINDOW_SECONDS_BOUNDS)
        && p.min_window_seconds <= p.max_window_seconds
        && within(p.min_samples, d::MIN_SAMPLES_BOUNDS)
        && within(
            p.scale_out_stabilization_seconds,
            d::SCALE_OUT_STABILIZATION_SECONDS_BOUNDS,
        )
        && within(
            p.scale_in_stabilization_seconds,
            d::SCALE_IN_STABILIZATION_SECONDS_BOUNDS,
        )
        && within(
            p.scale_out_cooldown_seconds,
            d::SCALE_OUT_COOLDOWN_SECONDS_BOUNDS,
        )
        && within(
            p.scale_in_cooldown_seconds,
            d::SCALE_IN_COOLDOWN_SECONDS_BOUNDS,
        )
        && within(
            p.provisioning_timeout_seconds,
            d::PROVISIONING_TIMEOUT_SECONDS_BOUNDS,
        )
        && within(
            p.redistribution_observation_seconds,
            d::REDISTRIBUTION_OBSERVATION_SECONDS_BOUNDS,
        )
        && within(p.cpu_high_millicores, d::CPU_HIGH_MILLICORES_BOUNDS)
        && within(p.cpu_low_millicores, d::CPU_LOW_MILLICORES_BOUNDS)
        && p.cpu_low_millicores < p.cpu_high_millicores
        && within(p.memory_high_mib, d::MEMORY_HIGH_MIB_BOUNDS)
        && within(p.memory_low_mib, d::MEMORY_LOW_MIB_BOUNDS)
        && p.memory_low_mib < p.memory_high_mib
}

/// A stable 64-bit FNV-1a digest in hex. It only has to notice a change between two
/// reconciles of the same fleet, so a cryptographic hash would buy nothing.
pub fn digest(parts: &[&str]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.as_bytes().iter().chain(std::iter::once(&0u8)) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// The policy's fingerprint: every field, mode included (a mode change restarts windows).
pub fn fingerprint(p: &Policy) -> String {
    let fields = [
        format!("{:?}", p.mode),
        p.min_members.to_string(),
        p.max_members.to_string(),
        p.scale_out_step.to_string(),
        p.sample_interval_seconds.to_string(),
        p.max_age_seconds.to_string(),
        p.min_window_seconds.to_string(),
        p.max_window_seconds.to_string(),
        p.min_samples.to_string(),
        p.scale_out_stabilization_seconds.to_string(),
        p.scale_in_stabilization_seconds.to_string(),
        p.scale_out_cooldown_seconds.to_string(),
        p.scale_in_cooldown_seconds.to_string(),
        p.provisioning_timeout_seconds.to_string(),
        p.redistribution_observation_seconds.to_string(),
        p.cpu_high_millicores.to_string(),
        p.cpu_low_millicores.to_string(),
        p.memory_high_mib.to_string(),
        p.memory_low_mib.to_string(),
    ];
    let refs: Vec<&str> = fields.iter().map(String::as_str).collect();
    digest(&refs)
}
