//! `spec.capacity`: bounds, thresholds and windows of the capacity policy.

use super::Checker;
use crate::{CelldFleet, defaults};

pub fn check(c: &mut Checker<'_>, fleet: &CelldFleet) {
    let Some(cap) = &fleet.spec.capacity else {
        return;
    };
    let f = |n: &str| format!("spec.capacity.{n}");
    use defaults::*;
    c.range(cap.min_members, &f("minMembers"), MEMBERS_BOUNDS);
    c.range(cap.max_members, &f("maxMembers"), MEMBERS_BOUNDS);
    c.range(
        cap.scale_out_step,
        &f("scaleOutStep"),
        SCALE_OUT_STEP_BOUNDS,
    );
    c.range(
        cap.sample_interval_seconds,
        &f("sampleIntervalSeconds"),
        SAMPLE_INTERVAL_SECONDS_BOUNDS,
    );
    c.range(
        cap.max_age_seconds,
        &f("maxAgeSeconds"),
        MAX_AGE_SECONDS_BOUNDS,
    );
    c.range(
        cap.min_window_seconds,
        &f("minWindowSeconds"),
        MIN_WINDOW_SECONDS_BOUNDS,
    );
    c.range(
        cap.max_window_seconds,
        &f("maxWindowSeconds"),
        MAX_WINDOW_SECONDS_BOUNDS,
    );
    c.range(cap.min_samples, &f("minSamples"), MIN_SAMPLES_BOUNDS);
    c.range(
        cap.scale_out_stabilization_seconds,
        &f("scaleOutStabilizationSeconds"),
        SCALE_OUT_STABILIZATION_SECONDS_BOUNDS,
    );
    c.range(
        cap.scale_in_stabilization_seconds,
        &f("scaleInStabilizationSeconds"),
        SCALE_IN_STABILIZATION_SECONDS_BOUNDS,
    );
    c.range(
        cap.scale_out_cooldown_seconds,
        &f("scaleOutCooldownSeconds"),
        SCALE_OUT_COOLDOWN_SECONDS_BOUNDS,
    );
    c.range(
        cap.scale_in_cooldown_seconds,
        &f("scaleInCooldownSeconds"),
        SCALE_IN_COOLDOWN_SECONDS_BOUNDS,
    );
    c.range(
        cap.provisioning_timeout_seconds,
        &f("provisioningTimeoutSeconds"),
        PROVISIONING_TIMEOUT_SECONDS_BOUNDS,
    );
    c.range(
        cap.redistribution_observation_seconds,
        &f("redistributionObservationSeconds"),
        REDISTRIBUTION_OBSERVATION_SECONDS_BOUNDS,
    );
    c.range(
        cap.cpu_high_millicores,
        &f("cpuHighMillicores"),
        CPU_HIGH_MILLICORES_BOUNDS,
    );
    c.range(
        cap.cpu_low_millicores,
        &f("cpuLowMillicores"),
        CPU_LOW_MILLICORES_BOUNDS,
    );
    c.range(
        cap.memory_high_mib,
        &f("memoryHighMiB"),
        MEMORY_HIGH_MIB_BOUNDS,
    );
    c.range(
        cap.memory_low_mib,
        &f("memoryLowMiB"),
        MEMORY_LOW_MIB_BOUNDS,
    );

    let p = cap.effective();
    if p.min_members > p.max_members {
        c.fail(
            &f("minMembers"),
            format!(
                "minMembers {} is above maxMembers {}",
                p.min_members, p.max_members
            ),
            format!(
                "minMembers at most maxMembers (defaults {} and {})",
                CAPACITY_DEFAULTS.min_members, CAPACITY_DEFAULTS.max_members
            ),
        );
    }
    let zones = fleet.spec.placement.zones.len() as i32;
    if p.min_members < zones {
        c.fail(
            &f("minMembers"),
            format!("minMembers {} cannot cover {zones} zones", p.min_members),
            format!("at least {zones}, one member per zone"),
        );
    }
    if p.cpu_low_millicores >= p.cpu_high_millicores {
        c.fail(
            &f("cpuLowMillicores"),
            format!(
                "cpuLowMillicores {} is not below cpuHighMillicores {}",
                p.cpu_low_millicores, p.cpu_high_millicores
            ),
            format!(
                "a low threshold below the high one (defaults {} and {})",
                CAPACITY_DEFAULTS.cpu_low_millicores, CAPACITY_DEFAULTS.cpu_high_millicores
            ),
        );
    }
    if p.memory_low_mib >= p.memory_high_mib {
        c.fail(
            &f("memoryLowMiB"),
            format!(
                "memoryLowMiB {} is not below memoryHighMiB {}",
                p.memory_low_mib, p.memory_high_mib
            ),
            format!(
                "a low threshold below the high one (defaults {} and {})",
                CAPACITY_DEFAULTS.memory_low_mib, CAPACITY_DEFAULTS.memory_high_mib
            ),
        );
    }
    if p.min_window_seconds > p.max_window_seconds {
        c.fail(
            &f("minWindowSeconds"),
            format!(
                "minWindowSeconds {} is above maxWindowSeconds {}",
                p.min_window_seconds, p.max_window_seconds
            ),
            "minWindowSeconds at most maxWindowSeconds",
        );
    }
    if p.sample_interval_seconds > p.max_age_seconds {
        c.fail(
            &f("sampleIntervalSeconds"),
            format!(
                "sampleIntervalSeconds {} is above maxAgeSeconds {}: every sample would be stale",
                p.sample_interval_seconds, p.max_age_seconds
            ),
            "sampleIntervalSeconds at most maxAgeSeconds",
        );
    }
}
