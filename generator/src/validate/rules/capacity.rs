//! `spec.capacity`: bounds, thresholds and windows of the capacity policy.

use super::Checker;
use crate::api::{CelldFleet, defaults};

pub fn check(c: &mut Checker<'_>, fleet: &CelldFleet) {
    let Some(cap) = &fleet.spec.capacity else {
        return;
    };
    let f = |n: &str| format!("spec.capacity.{n}");
    let max = defaults::MAX_MEMBERS;
    c.range(cap.min_members, &f("minMembers"), 1, max);
    c.range(cap.max_members, &f("maxMembers"), 1, max);
    c.range(cap.scale_out_step, &f("scaleOutStep"), 1, 10);
    c.range(
        cap.sample_interval_seconds,
        &f("sampleIntervalSeconds"),
        5,
        300,
    );
    c.range(cap.max_age_seconds, &f("maxAgeSeconds"), 10, 600);
    c.range(cap.min_window_seconds, &f("minWindowSeconds"), 1, 60);
    c.range(cap.max_window_seconds, &f("maxWindowSeconds"), 5, 300);
    c.range(cap.min_samples, &f("minSamples"), 2, 100);
    c.range(
        cap.scale_out_stabilization_seconds,
        &f("scaleOutStabilizationSeconds"),
        10,
        3600,
    );
    c.range(
        cap.scale_in_stabilization_seconds,
        &f("scaleInStabilizationSeconds"),
        60,
        86_400,
    );
    c.range(
        cap.scale_out_cooldown_seconds,
        &f("scaleOutCooldownSeconds"),
        30,
        86_400,
    );
    c.range(
        cap.scale_in_cooldown_seconds,
        &f("scaleInCooldownSeconds"),
        60,
        86_400,
    );
    c.range(
        cap.provisioning_timeout_seconds,
        &f("provisioningTimeoutSeconds"),
        60,
        86_400,
    );
    c.range(
        cap.redistribution_observation_seconds,
        &f("redistributionObservationSeconds"),
        30,
        3600,
    );
    c.range(
        cap.cpu_high_millicores,
        &f("cpuHighMillicores"),
        1,
        1_000_000,
    );
    c.range(cap.cpu_low_millicores, &f("cpuLowMillicores"), 0, 1_000_000);
    c.range(cap.memory_high_mib, &f("memoryHighMiB"), 1, 1_048_576);
    c.range(cap.memory_low_mib, &f("memoryLowMiB"), 0, 1_048_576);

    let p = cap.effective();
    if p.min_members > p.max_members {
        c.fail(
            &f("minMembers"),
            format!(
                "minMembers {} is above maxMembers {}",
                p.min_members, p.max_members
            ),
            "minMembers at most maxMembers (defaults 3 and 10)",
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
            "a low threshold below the high one (defaults 80 and 200)",
        );
    }
    if p.memory_low_mib >= p.memory_high_mib {
        c.fail(
            &f("memoryLowMiB"),
            format!(
                "memoryLowMiB {} is not below memoryHighMiB {}",
                p.memory_low_mib, p.memory_high_mib
            ),
            "a low threshold below the high one (defaults 384 and 768)",
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
