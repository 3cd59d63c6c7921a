//! `spec.execution` and `spec.lifecycle`: resources and shutdown timing.

use super::Checker;
use crate::validate::formats::parse_quantity;
use crate::{CelldFleet, defaults};

pub fn check(c: &mut Checker<'_>, fleet: &CelldFleet) {
    let spec = &fleet.spec;
    if let Some(e) = &spec.execution {
        let cpu = "a CPU quantity such as 250m, 1 or 1.5";
        let mem = "a memory quantity such as 512Mi or 2Gi";
        for (value, field, memory, hint) in [
            (&e.cpu_request, "spec.execution.cpuRequest", false, cpu),
            (&e.cpu_limit, "spec.execution.cpuLimit", false, cpu),
            (&e.memory_request, "spec.execution.memoryRequest", true, mem),
            (&e.memory_limit, "spec.execution.memoryLimit", true, mem),
        ] {
            if let Some(v) = value {
                match parse_quantity(v, memory) {
                    None => c.fail(field, format!("`{v}` is not a quantity"), hint),
                    Some(q) if q <= 0.0 => c.fail(field, format!("`{v}` is not positive"), hint),
                    Some(_) => {}
                }
            }
        }
        c.range(
            e.max_resident_cells,
            "spec.execution.maxResidentCells",
            defaults::MAX_RESIDENT_CELLS_BOUNDS,
        );
        c.range(
            e.idle_evict_seconds,
            "spec.execution.idleEvictSeconds",
            defaults::IDLE_EVICT_SECONDS_BOUNDS,
        );
    }
    // Limits are compared with defaults applied: `memoryLimit: 256Mi` alone is below the
    // default 512Mi request and would never schedule as intended.
    if let (Some(req), Some(lim)) = (
        parse_quantity(spec.cpu_request(), false),
        spec.cpu_limit().and_then(|l| parse_quantity(l, false)),
    ) && lim < req
    {
        c.fail(
            "spec.execution.cpuLimit",
            format!(
                "cpuLimit {} is below cpuRequest {}",
                spec.cpu_limit().unwrap_or_default(),
                spec.cpu_request()
            ),
            "a limit at least the request",
        );
    }
    if let (Some(req), Some(lim)) = (
        parse_quantity(spec.memory_request(), true),
        parse_quantity(spec.memory_limit(), true),
    ) && lim < req
    {
        c.fail(
            "spec.execution.memoryLimit",
            format!(
                "memoryLimit {} is below memoryRequest {}",
                spec.memory_limit(),
                spec.memory_request()
            ),
            "a limit at least the request (the defaults are 512Mi and 1Gi)",
        );
    }
    if let Some(l) = &spec.lifecycle {
        c.range(
            l.shutdown_seconds,
            "spec.lifecycle.shutdownSeconds",
            defaults::SHUTDOWN_SECONDS_BOUNDS,
        );
        c.range(
            l.termination_grace_seconds,
            "spec.lifecycle.terminationGraceSeconds",
            defaults::TERMINATION_GRACE_SECONDS_BOUNDS,
        );
        let (shutdown, grace) = (spec.shutdown_seconds(), spec.termination_grace_seconds());
        if defaults::SHUTDOWN_SECONDS_BOUNDS.contains(shutdown)
            && grace < shutdown + defaults::GRACE_HEADROOM_SECONDS
        {
            let field = if l.termination_grace_seconds.is_some() {
                "spec.lifecycle.terminationGraceSeconds"
            } else {
                "spec.lifecycle.shutdownSeconds"
            };
            c.fail(
                field,
                format!(
                    "a termination grace of {grace}s leaves a {shutdown}s drain less than {}s of headroom",
                    defaults::GRACE_HEADROOM_SECONDS
                ),
                format!(
                    "terminationGraceSeconds of at least {} (shutdownSeconds + {}), so the kubelet never kills a draining member",
                    shutdown + defaults::GRACE_HEADROOM_SECONDS,
                    defaults::GRACE_HEADROOM_SECONDS
                ),
            );
        }
    }
}
