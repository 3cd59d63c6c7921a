//! End-to-end rendering benchmark (a plain program, not a timed test):
//! `cargo bench -p celld-gen --bench render [-- FLEETS RUNS]`.
//!
//! Writes FLEETS (default 1,000) varied fleet files to a temporary directory, then, RUNS
//! times (default 11), loads and validates them, renders them (with the parse-back check
//! of every object) and writes the whole output tree atomically. Prints the median, the
//! fastest and the slowest run. The goal is all 1,000 fleets in under one second.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use celld_gen::load::load_paths;
use celld_gen::output::write_tree;
use celld_gen::render::render_all;

const IMAGE: &str = "ghcr.io/ewhauser/celld@sha256:1c0d854cd2af39fa439f163d5b88a19c7bccefd25fe35e2c0e1f43b3d886f424";

/// A deterministic, varied fleet file: profiles, workloads, placement, zones, tuning,
/// endpoints, telemetry, routing and capacity all rotate with `i`.
fn fleet(i: usize, variant: usize) -> String {
    let persistent = i.is_multiple_of(3);
    let region = ["us-east-1", "eu-west-1", "ap-southeast-2"][i % 3];
    let zones = 1 + i % 3;
    let zone_list: Vec<String> = (0..zones)
        .map(|z| format!("{region}{}", (b'a' + z as u8) as char))
        .collect();
    let identity = format!("{:0>26}", format!("bench{variant}x{i}"));
    let mut s = format!(
        "apiVersion: fleet.celld.dev/v1alpha1
kind: CelldFleet
metadata:
  name: fleet-{i}
  namespace: team-{team}
spec:
  identity: {identity}
  profile: {profile}
  runtimeImage: {IMAGE}
  members: {members}
  serviceAccountName: runtime
  storage:
    bucket: bench-bucket-{i}
    region: {region}
",
        team = i % 17,
        profile = if persistent {
            "PersistentFleet"
        } else {
            "Bucket"
        },
        members = zones + i % 4,
    );
    if persistent {
        s.push_str("    storageClassName: gp3\n    sizeGiB: 20\n");
    } else if i % 5 == 1 {
        s.push_str(
            "    prefix: tenant\n    endpoint:\n      url: http://minio.storage.svc:9000\n      credentialsSecretName: minio\n",
        );
    }
    s.push_str(&format!(
        "  placement:\n    zones: [{}]\n    mode: {}\n",
        zone_list.join(", "),
        if i.is_multiple_of(4) {
            "Relaxed"
        } else {
            "Strict"
        }
    ));
    if !persistent && i.is_multiple_of(2) {
        s.push_str("  bucketWorkload: Ordered\n");
    }
    if i % 4 == 1 {
        s.push_str(
            "  execution: {cpuRequest: 500m, cpuLimit: \"2\", memoryRequest: 1Gi, memoryLimit: 2Gi, maxResidentCells: 300}\n  lifecycle: {shutdownSeconds: 30, terminationGraceSeconds: 40}\n  maintenance: {restartToken: \"r1\"}\n  env:\n  - {name: RUST_LOG, value: info}\n",
        );
    }
    if i % 6 == 2 {
        s.push_str(
            "  telemetry:\n    collectorURL: http://otel.obs.svc:4318\n    egress: {namespace: obs, podLabels: {app: otel}}\n    sampler: always_on\n",
        );
    }
    match i % 5 {
        0 => s.push_str(&format!(
            "  routing:\n    hostnames: [f{i}.example.com]\n    source: {{namespace: gateways, podLabels: {{app: envoy}}}}\n    gateway: {{name: public, namespace: gateways}}\n"
        )),
        3 => s.push_str(&format!(
            "  routing:\n    hostnames: [f{i}.example.org]\n    source: {{namespace: ingress, podLabels: {{app: nginx}}}}\n    ingress: {{className: nginx, tlsSecretName: tls}}\n"
        )),
        _ => {}
    }
    if i % 7 == 3 {
        s.push_str(&format!(
            "  capacity: {{mode: Automatic, minMembers: {zones}, maxMembers: 20}}\n"
        ));
    }
    s
}

/// CPU time (user + system) of this process so far, from /proc (Linux; zero elsewhere).
/// Unlike wall time, it does not grow when other processes compete for the cores.
fn cpu_time() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    // USER_HZ is 100 on every Linux platform Rust supports.
    Duration::from_millis(ticks * 10)
}

/// Medians of a series of runs.
struct Measurement {
    total: Duration,
    load: Duration,
    render: Duration,
    write: Duration,
    cpu: Duration,
    objects: usize,
    files: usize,
}

/// Times `runs` end-to-end renders of `paths` into `out` (alternating between the given
/// sets of fleets); `prepare` runs, untimed, before each.
fn measure(paths: &[&[PathBuf]], out: &Path, runs: usize, prepare: impl Fn()) -> Measurement {
    let mut series: [Vec<Duration>; 5] = Default::default();
    let (mut objects, mut files) = (0, 0);
    for run in 0..runs {
        prepare();
        let paths = paths[run % paths.len()];
        let start = Instant::now();
        let cpu_start = cpu_time();
        let loaded = load_paths(paths).unwrap_or_else(|d| {
            panic!("benchmark fleets do not validate: {}", d[0]);
        });
        let loaded_at = Instant::now();
        let bundle = render_all(&loaded).unwrap_or_else(|d| panic!("{}", d[0]));
        let rendered_at = Instant::now();
        write_tree(out, &bundle).unwrap();
        let end = Instant::now();
        series[0].push(end - start);
        series[1].push(loaded_at - start);
        series[2].push(rendered_at - loaded_at);
        series[3].push(end - rendered_at);
        series[4].push(cpu_time() - cpu_start);
        objects = bundle.object_count();
        files = bundle.files.len();
    }
    let [total, load, render, write, cpu] = series.map(|mut v| {
        v.sort();
        v[v.len() / 2]
    });
    Measurement {
        total,
        load,
        render,
        write,
        cpu,
        objects,
        files,
    }
}

fn write_fleets(dir: &Path, fleets: usize, variant: usize) -> Vec<PathBuf> {
    std::fs::create_dir(dir).unwrap();
    (0..fleets)
        .map(|i| {
            let p = dir.join(format!("fleet-{i:04}.yaml"));
            std::fs::write(&p, fleet(i, variant)).unwrap();
            p
        })
        .collect()
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with("--"));
    let fleets: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(11);

    let work = tempfile::tempdir().expect("temporary directory");
    // Two sets of the same fleets with different identities: every rendered file differs.
    let a = write_fleets(&work.path().join("fleets-a"), fleets, 0);
    let b = write_fleets(&work.path().join("fleets-b"), fleets, 1);
    let out = work.path().join("deploy");
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let report = |what: &str, m: Measurement| {
        println!(
            "{what}: {fleets} fleets ({} objects, {} files), median of {runs} runs: {:.0} ms \
             (load + validate {:.0} ms, render + parse-back {:.0} ms, write {:.0} ms; CPU {:.0} ms)",
            m.objects,
            m.files,
            ms(m.total),
            ms(m.load),
            ms(m.render),
            ms(m.write),
            ms(m.cpu),
        );
    };

    // 1. Into a new directory (the previous output is removed before each run, untimed).
    report(
        "new directory",
        measure(&[&a], &out, runs, || {
            let _ = std::fs::remove_dir_all(&out);
        }),
    );
    // 2. Replacing a previous output in which every file changes.
    report(
        "replace, every file changed",
        measure(&[&a, &b], &out, runs, || {}),
    );
    // 3. Re-rendering into an identical tree (nothing to write).
    report("re-render, unchanged", measure(&[&a], &out, runs, || {}));
}
