//! End-to-end rendering benchmark (a plain program, not a timed test):
//! `cargo bench -p celld-gen --bench render [-- FLEETS RUNS]`.
//!
//! Writes FLEETS (default 1,000) varied fleet files to a temporary directory, then, RUNS
//! times (default 11), loads and validates them, renders them (with the parse-back check
//! of every object) and writes the whole output tree atomically. Prints the median, the
//! fastest and the slowest run. The goal is all 1,000 fleets in under one second.
//!
//! Then times the parse-back check alone (and its parts), and runs `celld-gen render
//! --stdout` and `kubectl kustomize` of an equivalent base-plus-overlays tree side by side
//! (alternated, median of up to 5 runs each) and prints the ratio. `kubectl` is `$KUBECTL`,
//! the test control plane's, or the one on `PATH`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use celld_gen::load::load_paths;
use celld_gen::output::write_tree;
use celld_gen::render::{parse, render_all, roundtrip};

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
    // Optional: only these sections (render, parse-back, kustomize), comma-separated.
    let only: Option<String> = args.next();
    let run = |section: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|s| s == section))
    };

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

    if run("render") {
        render_runs(&a, &b, &out, runs, report);
    }
    // 4. The parse-back check alone, and its parts.
    if run("parse-back") {
        parse_back(&[&a], runs);
    }
    // 5. Side by side with Kustomize, both as the commands a user runs.
    if run("kustomize") {
        versus_kustomize(
            work.path(),
            &work.path().join("fleets-a"),
            fleets,
            runs.min(5),
        );
    }
}

fn render_runs(
    a: &[PathBuf],
    b: &[PathBuf],
    out: &Path,
    runs: usize,
    report: impl Fn(&str, Measurement),
) {
    // 1. Into a new directory (the previous output is removed before each run, untimed).
    report(
        "new directory",
        measure(&[a], out, runs, || {
            let _ = std::fs::remove_dir_all(out);
        }),
    );
    // 2. Replacing a previous output in which every file changes.
    report(
        "replace, every file changed",
        measure(&[a, b], out, runs, || {}),
    );
    // 3. Re-rendering into an identical tree (nothing to write).
    report("re-render, unchanged", measure(&[a], out, runs, || {}));
}

/// `kubectl` for the Kustomize comparison: `$KUBECTL`, the test control plane's (built by
/// `tests/controlplane/build.sh`), or the one on `PATH`.
fn kubectl() -> Option<PathBuf> {
    if let Some(k) = std::env::var_os("KUBECTL") {
        return Some(PathBuf::from(k));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/.cluster/bin");
    let built = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("kubectl"))
        .find(|p| p.is_file());
    built.or_else(|| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("kubectl"))
                .find(|p| p.is_file())
        })
    })
}

/// The Kustomize way to the same manifests: one base per workload kind (the objects of one
/// rendered PersistentFleet and of one rendered Bucket fleet), and one overlay per fleet
/// that sets its namespace, a name suffix, its identity label (selectors included), the
/// image digest, and patches its members, bucket, region and zones; a top kustomization
/// lists every overlay. `kubectl kustomize` of the top builds the objects `celld-gen
/// render --stdout` prints, but for the optional routing objects of the few fleets with
/// `routing` (the bases have none), which makes Kustomize's share of the work smaller.
fn kustomize_tree(dir: &Path, fleets: usize) -> PathBuf {
    let bases = dir.join("kustomize/bases");
    for (kind, i) in [("statefulset", 0), ("deployment", 1)] {
        let fleet = celld_gen::load::load_str(Path::new("base.yaml"), &fleet(i, 0))
            .unwrap_or_else(|d| panic!("{}", d[0]));
        let rendered = celld_gen::render::render_fleet(&fleet).expect("base renders");
        let base = bases.join(kind);
        std::fs::create_dir_all(&base).unwrap();
        let mut resources = Vec::new();
        for o in &rendered.objects {
            std::fs::write(base.join(o.file), &o.yaml).unwrap();
            resources.push(format!("- {}", o.file));
        }
        std::fs::write(
            base.join("kustomization.yaml"),
            format!(
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n{}\n",
                resources.join("\n")
            ),
        )
        .unwrap();
    }
    let overlays = dir.join("kustomize/overlays");
    let mut top = Vec::new();
    for i in 0..fleets {
        let kind = if i.is_multiple_of(3) {
            "statefulset"
        } else {
            "deployment"
        };
        let workload = if kind == "statefulset" {
            "StatefulSet"
        } else {
            "Deployment"
        };
        let o = overlays.join(format!("fleet-{i}"));
        std::fs::create_dir_all(&o).unwrap();
        let region = ["us-east-1", "eu-west-1", "ap-southeast-2"][i % 3];
        let zones = 1 + i % 3;
        let members = zones + i % 4;
        std::fs::write(
            o.join("kustomization.yaml"),
            format!(
                "apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../../bases/{kind}
namespace: team-{team}
nameSuffix: \"-{i}\"
labels:
- pairs:
    fleet.celld.dev/identity: {identity}
  includeSelectors: true
images:
- name: ghcr.io/ewhauser/celld
  digest: sha256:{digest:0>64}
patches:
- target:
    kind: CelldFleet
  patch: |-
    - op: replace
      path: /spec/members
      value: {members}
    - op: replace
      path: /spec/storage/bucket
      value: bench-bucket-{i}
    - op: replace
      path: /spec/storage/region
      value: {region}
    - op: replace
      path: /spec/identity
      value: {identity}
- target:
    kind: {workload}
  patch: |-
    - op: add
      path: /metadata/annotations/fleet.celld.dev~1zones
      value: \"{zones}\"
- target:
    kind: CelldBucketReservation
  patch: |-
    - op: replace
      path: /spec/bucket
      value: bench-bucket-{i}
",
                team = i % 17,
                identity = format!("{:0>26}", format!("bench0x{i}")),
                digest = i,
            ),
        )
        .unwrap();
        top.push(format!("- overlays/fleet-{i}"));
    }
    let root = dir.join("kustomize");
    std::fs::write(
        root.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n{}\n",
            top.join("\n")
        ),
    )
    .unwrap();
    root
}

/// Runs `cmd` `runs` times, each with its stdout counted and discarded: (median wall
/// time, bytes printed, documents printed).
fn time_command(
    mut cmd: impl FnMut() -> std::process::Command,
    runs: usize,
) -> (Duration, usize, usize) {
    let mut times = Vec::new();
    let (mut bytes, mut docs) = (0, 0);
    for _ in 0..runs {
        let start = Instant::now();
        let out = cmd().output().expect("the command runs");
        times.push(start.elapsed());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        bytes = out.stdout.len();
        let text = String::from_utf8_lossy(&out.stdout);
        docs =
            text.matches("\napiVersion: ").count() + usize::from(text.starts_with("apiVersion: "));
    }
    times.sort();
    (times[times.len() / 2], bytes, docs)
}

fn versus_kustomize(work: &Path, fleets_dir: &Path, fleets: usize, runs: usize) {
    let Some(kubectl) = kubectl() else {
        println!(
            "versus Kustomize: not run, no kubectl (set KUBECTL, or run tests/controlplane/build.sh)"
        );
        return;
    };
    let tree = kustomize_tree(work, fleets);
    let celld_gen_bin = env!("CARGO_BIN_EXE_celld-gen");
    // Alternate the two so that a noisy moment hurts both alike.
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let (mut our_docs, mut their_docs) = (0, 0);
    for _ in 0..runs {
        let (t, _, d) = time_command(
            || {
                let mut c = std::process::Command::new(celld_gen_bin);
                c.arg("render").arg(fleets_dir).arg("--stdout");
                c
            },
            1,
        );
        ours.push(t);
        our_docs = d;
        let (t, _, d) = time_command(
            || {
                let mut c = std::process::Command::new(&kubectl);
                c.arg("kustomize").arg(&tree);
                c
            },
            1,
        );
        theirs.push(t);
        their_docs = d;
    }
    ours.sort();
    theirs.sort();
    let (o, k) = (ours[ours.len() / 2], theirs[theirs.len() / 2]);
    println!(
        "versus Kustomize ({}), median of {runs} alternated runs: `celld-gen render {fleets} fleets \
         --stdout` {:.0} ms ({our_docs} objects), `kubectl kustomize` of base + {fleets} overlays \
         {:.0} ms ({their_docs} objects): celld-gen {:.1}x faster",
        kubectl.display(),
        o.as_secs_f64() * 1000.0,
        k.as_secs_f64() * 1000.0,
        k.as_secs_f64() / o.as_secs_f64().max(1e-9),
    );
}
/// Times the parse-back check of every rendered object ([`roundtrip::check`]) and two of
/// its three parts: the YAML parse and the comparison (of a tree with itself, the work of
/// an object that passes); the rest is the typed parse and re-serialization.
fn parse_back(inputs: &[&[PathBuf]], runs: usize) {
    let paths: Vec<PathBuf> = inputs.iter().flat_map(|s| s.iter().cloned()).collect();
    let loaded = load_paths(&paths).unwrap_or_else(|d| panic!("{}", d[0]));
    let bundle = render_all(&loaded).unwrap_or_else(|d| panic!("{}", d[0]));
    let objects: Vec<_> = bundle.fleets.iter().flat_map(|f| &f.objects).collect();
    let median = |f: &dyn Fn()| {
        let mut v: Vec<Duration> = (0..runs)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect();
        v.sort();
        v[v.len() / 2]
    };
    let check = median(&|| {
        for o in &objects {
            roundtrip::check(o.kind, &o.yaml).unwrap();
        }
    });
    let trees: Vec<_> = objects
        .iter()
        .map(|o| parse::parse_document(&o.yaml).unwrap())
        .collect();
    let yaml = median(&|| {
        for o in &objects {
            std::hint::black_box(parse::parse_document(&o.yaml).unwrap());
        }
    });
    let compare = median(&|| {
        for t in &trees {
            assert!(roundtrip::same_tree(t, t).is_ok());
        }
    });
    // The comparison as it was before equality came first: the walk that names the first
    // difference, run on every object.
    let walk = median(&|| {
        for t in &trees {
            assert!(roundtrip::first_difference(t, t, &mut String::new()).is_none());
        }
    });
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "parse-back check alone: {} objects, median of {runs} runs: {:.0} ms (YAML parse {:.0} ms, \
         comparison {:.0} ms, typed parse and back {:.0} ms); the comparison by the walk alone \
         (before equality came first): {:.0} ms",
        objects.len(),
        ms(check),
        ms(yaml),
        ms(compare),
        ms(check.saturating_sub(yaml + compare)),
        ms(walk),
    );
}
