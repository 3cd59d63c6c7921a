//! The `celld-gen` binary end to end: exit codes, all-or-nothing writes, diff, init.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use celld_gen::cli::{InitArgs, ProfileArg, fleet_file, new_identity};
use celld_gen::load::load_str;

const IMAGE: &str = "ghcr.io/ewhauser/celld@sha256:1c0d854cd2af39fa439f163d5b88a19c7bccefd25fe35e2c0e1f43b3d886f424";

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_celld-gen"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).env("NO_COLOR", "1").output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("examples")
        .join(name)
}

fn init_args(profile: ProfileArg) -> InitArgs {
    InitArgs {
        name: "alpha".into(),
        from: None,
        namespace: Some("apps".into()),
        profile: Some(profile),
        bucket: Some("alpha-cells".into()),
        region: Some("us-east-1".into()),
        zones: vec!["a".into(), "b".into(), "us-east-1c".into()],
        image: Some(IMAGE.into()),
        storage_class: (profile == ProfileArg::PersistentFleet).then(|| "gp3".into()),
        size_gib: None,
        bucket_workload: None,
        members: None,
        service_account: None,
        prefix: None,
        placement: None,
        output: None,
        schema: celld_gen::cli::DEFAULT_SCHEMA_REF.into(),
        zone_format: None,
        endpoint: None,
        credentials_secret: None,
    }
}

#[test]
fn init_output_is_a_valid_fleet_for_both_profiles() {
    for profile in [ProfileArg::Bucket, ProfileArg::PersistentFleet] {
        let id = new_identity();
        let text = fleet_file(&init_args(profile), &id).unwrap();
        let fleet =
            load_str(Path::new("init.yaml"), &text).unwrap_or_else(|d| panic!("{text}\n{d:?}"));
        assert_eq!(fleet.spec.identity, id);
        assert_eq!(
            fleet.spec.placement.zones,
            ["us-east-1a", "us-east-1b", "us-east-1c"]
        );
        assert_eq!(fleet.spec.members, Some(3));
    }
}

#[test]
fn identities_are_fresh_and_well_formed() {
    let a = new_identity();
    let b = new_identity();
    assert_ne!(a, b);
    for id in [a, b] {
        assert_eq!(id.len(), 26);
        assert!(
            id.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
    }
}

#[test]
fn init_binary_prints_a_fleet_that_checks() {
    let out = run(&[
        "init",
        "beta",
        "--namespace",
        "apps",
        "--profile",
        "PersistentFleet",
        "--bucket",
        "beta-cells",
        "--region",
        "eu-west-1",
        "--zones",
        "a,b,c",
        "--storage-class",
        "gp3",
        "--image",
        IMAGE,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("beta.yaml");
    fs::write(&file, &out.stdout).unwrap();
    let check = run(&["check", file.to_str().unwrap()]);
    assert!(
        check.status.success(),
        "{}{}",
        text(&check.stdout),
        text(&check.stderr)
    );
}

#[test]
fn init_refuses_missing_required_values() {
    // No image: there is no default runtime image.
    let out = run(&[
        "init",
        "beta",
        "--namespace",
        "apps",
        "--profile",
        "Bucket",
        "--bucket",
        "b-cells",
        "--region",
        "eu-west-1",
        "--zones",
        "a",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--image"),
        "{}",
        text(&out.stderr)
    );
    // PersistentFleet without a storage class.
    let out = run(&[
        "init",
        "beta",
        "--namespace",
        "apps",
        "--profile",
        "PersistentFleet",
        "--bucket",
        "b-cells",
        "--region",
        "eu-west-1",
        "--zones",
        "a",
        "--image",
        IMAGE,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--storage-class"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn render_writes_a_tree_and_diff_reports_it_up_to_date() {
    let dir = tempfile::tempdir().unwrap();
    let outdir = dir.path().join("deploy");
    let ex = example("persistent.yaml");
    let out = run(&[
        "render",
        ex.to_str().unwrap(),
        "-o",
        outdir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("rendered 1 fleet, 7 objects"),
        "{}",
        text(&out.stderr)
    );
    assert!(outdir.join("ledger/persistent/statefulset.yaml").is_file());
    assert!(outdir.join("kustomization.yaml").is_file());

    let diff = run(&["diff", ex.to_str().unwrap(), "-o", outdir.to_str().unwrap()]);
    assert_eq!(diff.status.code(), Some(0), "{}", text(&diff.stderr));
    assert!(diff.stdout.is_empty());

    // A hand edit and a stray file are both reported, and diff exits 1.
    let sts = outdir.join("ledger/persistent/statefulset.yaml");
    let edited = fs::read_to_string(&sts)
        .unwrap()
        .replace("partition: 0", "partition: 2");
    fs::write(&sts, edited).unwrap();
    fs::write(outdir.join("ledger/stray.yaml"), "x: 1\n").unwrap();
    let diff = run(&["diff", ex.to_str().unwrap(), "-o", outdir.to_str().unwrap()]);
    assert_eq!(diff.status.code(), Some(1));
    let d = text(&diff.stdout);
    assert!(
        d.contains("--- a/ledger/persistent/statefulset.yaml"),
        "{d}"
    );
    assert!(
        d.contains("-      partition: 2") && d.contains("+      partition: 0"),
        "{d}"
    );
    assert!(d.contains("--- a/ledger/stray.yaml\n+++ /dev/null"), "{d}");
    assert!(
        !d.contains('\u{1b}'),
        "no colors when not on a terminal: {d}"
    );

    // Rendering again restores exactly the rendered tree.
    let out = run(&[
        "render",
        ex.to_str().unwrap(),
        "-o",
        outdir.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    assert!(!outdir.join("ledger/stray.yaml").exists());
    let diff = run(&["diff", ex.to_str().unwrap(), "-o", outdir.to_str().unwrap()]);
    assert_eq!(diff.status.code(), Some(0));
}

#[test]
fn a_failing_fleet_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let outdir = dir.path().join("deploy");
    let good = example("persistent.yaml");
    let out = run(&[
        "render",
        good.to_str().unwrap(),
        "-o",
        outdir.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let before = celld_gen::output::read_tree(&outdir).unwrap();

    let bad = dir.path().join("bad.yaml");
    let text_bad = fs::read_to_string(example("bucket-deployment.yaml"))
        .unwrap()
        .replace("  members: 3\n", "  members: 3\n  replicas: 3\n");
    fs::write(&bad, text_bad).unwrap();
    let out = run(&[
        "render",
        good.to_str().unwrap(),
        bad.to_str().unwrap(),
        "-o",
        outdir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("bad.yaml") && err.contains("nothing was written"),
        "{err}"
    );
    assert_eq!(celld_gen::output::read_tree(&outdir).unwrap(), before);
    // No temporary directories are left behind.
    let leftovers: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("celld-gen"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn render_refuses_to_replace_a_directory_it_did_not_write() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("precious.txt"), "keep me").unwrap();
    let ex = example("persistent.yaml");
    let out = run(&[
        "render",
        ex.to_str().unwrap(),
        "-o",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("not a celld-gen output directory"));
    assert_eq!(
        fs::read_to_string(dir.path().join("precious.txt")).unwrap(),
        "keep me"
    );
}

/// `install -o deploy/cluster` and `render fleets -o deploy` share one folder of a GitOps
/// repository in either order: each command's tree is its own, the other's is kept, never
/// compared, never counted as fleet folders, and a second run of either writes nothing.
#[test]
fn install_and_render_share_one_output_folder_in_either_order() {
    for install_first in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let deploy = dir.path().join("deploy");
        let cluster = deploy.join("cluster");
        let (d, c) = (deploy.to_str().unwrap(), cluster.to_str().unwrap());
        let ex = example("persistent.yaml");
        let ex = ex.to_str().unwrap();
        let install = || run(&["install", "-o", c]);
        let render = || run(&["render", ex, "-o", d]);
        let (first, second) = if install_first {
            (install(), render())
        } else {
            (render(), install())
        };
        for out in [&first, &second] {
            assert!(out.status.success(), "{}", text(&out.stderr));
        }
        let tree = celld_gen::output::read_tree(&deploy).unwrap();
        assert!(tree.iter().any(|(p, _)| p == "cluster/kustomization.yaml"));
        assert!(
            tree.iter()
                .any(|(p, _)| p == "ledger/persistent/statefulset.yaml")
        );
        // Again, both: nothing to do, and nothing the other wrote is taken for a fleet
        // folder to remove.
        let again = render();
        assert!(
            again.status.success() && text(&again.stderr).contains("nothing written"),
            "{}",
            text(&again.stderr)
        );
        assert!(text(&install().stderr).contains("already up to date"));
        let diff = run(&["diff", ex, "-o", d]);
        assert_eq!(diff.status.code(), Some(0), "{}", text(&diff.stdout));
        assert_eq!(celld_gen::output::read_tree(&deploy).unwrap(), tree);
        // A fleet namespace named like the install folder would write into it: refused.
        let clash = dir.path().join("cluster.yaml");
        fs::write(
            &clash,
            fs::read_to_string(ex)
                .unwrap()
                .replace("namespace: ledger", "namespace: cluster")
                .replace("ylwg20pyt4vrb3ipxmqm77b6in", "ylwg20pyt4vrb3ipxmqm77b6im")
                .replace("bucket: ledger-cells", "bucket: cluster-cells"),
        )
        .unwrap();
        let out = run(&["render", ex, clash.to_str().unwrap(), "-o", d]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            text(&out.stderr).contains("holds the output of another celld-gen command"),
            "{}",
            text(&out.stderr)
        );
        assert_eq!(celld_gen::output::read_tree(&deploy).unwrap(), tree);
    }
}

/// The healer image is pinned by digest (a tag beside it is dropped from the rendering);
/// a tag alone only with --allow-tag.
#[test]
fn install_pins_the_healer_image_by_digest() {
    let digest = "4f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b";
    let out = run(&[
        "install",
        "--stdout",
        "--image",
        "ghcr.io/x/celld-healer:latest",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is not pinned by digest"),
        "{}",
        text(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    let out = run(&[
        "install",
        "--stdout",
        "--image",
        "ghcr.io/x/celld-healer:latest",
        "--allow-tag",
    ]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("image: \"ghcr.io/x/celld-healer:latest\""));
    let tagged = format!("ghcr.io/x/celld-healer:v1@sha256:{digest}");
    let out = run(&["install", "--stdout", "--image", &tagged]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&format!(
            "image: \"ghcr.io/x/celld-healer@sha256:{digest}\""
        )),
        "the digest alone is rendered"
    );
}

/// `init --from FILE NAME`: every setting of FILE's fleet but the name, the identity
/// and the storage; the result checks, and renders beside its source.
#[test]
fn init_from_makes_a_fleet_like_another() {
    let dir = tempfile::tempdir().unwrap();
    let ordered = example("bucket-ordered.yaml");
    let out = run(&["init", "orders-eu", "--from", ordered.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let made = dir.path().join("orders-eu.yaml");
    fs::write(&made, &out.stdout).unwrap();
    let source = load_str(&ordered, &fs::read_to_string(&ordered).unwrap()).unwrap();
    let copy = load_str(&made, &text(&out.stdout)).unwrap();
    assert_ne!(copy.spec.identity, source.spec.identity);
    assert_eq!(copy.spec.storage.bucket, source.spec.storage.bucket);
    assert_eq!(copy.spec.storage.prefix.as_deref(), Some("orders-eu"));
    assert_eq!(copy.spec.placement, source.spec.placement);
    assert_eq!(copy.spec.runtime_image, source.spec.runtime_image);
    assert_eq!(copy.metadata.namespace, source.metadata.namespace);
    let both = run(&[
        "render",
        ordered.to_str().unwrap(),
        made.to_str().unwrap(),
        "-o",
        dir.path().join("deploy").to_str().unwrap(),
    ]);
    assert!(both.status.success(), "{}", text(&both.stderr));

    // A source that uses its whole bucket: a bucket of its own is needed.
    let persistent = example("persistent.yaml");
    let p = persistent.to_str().unwrap();
    let out = run(&["init", "ledger-eu", "--from", p]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("pass --bucket"),
        "{}",
        text(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    let out = run(&["init", "ledger-eu", "--from", p, "--prefix", "eu"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("overlaps"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&[
        "init",
        "ledger-eu",
        "--from",
        p,
        "--bucket",
        "ledger-eu-cells",
        "-n",
        "ledger-eu",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let copy = load_str(Path::new("x.yaml"), &text(&out.stdout)).unwrap();
    assert_eq!(copy.metadata.namespace.as_deref(), Some("ledger-eu"));
    assert_eq!(copy.spec.storage.bucket, "ledger-eu-cells");
    // Routed hostnames are not copied (each routes to one fleet).
    let routed = example("routing-gateway.yaml");
    let out = run(&[
        "init",
        "web-eu",
        "--from",
        routed.to_str().unwrap(),
        "--bucket",
        "web-eu-cells",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("spec.routing"),
        "{}",
        text(&out.stderr)
    );
    assert!(!text(&out.stdout).contains("hostnames"));
    // Settings come from FILE, not from flags.
    let out = run(&["init", "x", "--from", p, "--profile", "Bucket"]);
    assert_eq!(out.status.code(), Some(2));
}

/// A patch file beside its fleet file applies whether the folder or the fleet file is
/// named: the same rendering either way.
#[test]
fn patches_beside_a_named_fleet_file_apply() {
    let dir = tempfile::tempdir().unwrap();
    let fleets = dir.path().join("fleets");
    fs::create_dir_all(&fleets).unwrap();
    fs::copy(example("persistent.yaml"), fleets.join("persistent.yaml")).unwrap();
    fs::write(
        fleets.join("persistent-patches.yaml"),
        "apiVersion: fleet.celld.dev/v1alpha1\nkind: CelldFleetPatch\n\
         metadata: {name: persistent, namespace: ledger}\npatches:\n\
         - target: {kind: StatefulSet}\n  jsonPatch: [{op: add, path: /spec/template/spec/dnsConfig, value: {options: [{name: ndots, value: \"2\"}]}}]\n",
    )
    .unwrap();
    // A patch for a fleet not rendered here, beside it, is not this run's business.
    fs::write(
        fleets.join("other-patches.yaml"),
        "apiVersion: fleet.celld.dev/v1alpha1\nkind: CelldFleetPatch\n\
         metadata: {name: other, namespace: ledger}\npatches:\n\
         - target: {kind: StatefulSet}\n  strategicMerge: {metadata: {labels: {a: b}}}\n",
    )
    .unwrap();
    let file = run(&[
        "render",
        fleets.join("persistent.yaml").to_str().unwrap(),
        "--stdout",
    ]);
    assert!(file.status.success(), "{}", text(&file.stderr));
    assert!(text(&file.stdout).contains("ndots"));
    fs::remove_file(fleets.join("other-patches.yaml")).unwrap();
    let folder = run(&["render", fleets.to_str().unwrap(), "--stdout"]);
    assert!(folder.status.success(), "{}", text(&folder.stderr));
    assert_eq!(file.stdout, folder.stdout);
}

#[test]
fn two_fleets_with_one_identity_or_bucket_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let original = fs::read_to_string(example("persistent.yaml")).unwrap();
    // Same identity, different name and bucket.
    let twin = original
        .replace("name: persistent", "name: persistent-twin")
        .replace("bucket: ledger-cells", "bucket: ledger-twin-cells");
    // Same bucket, different name and identity.
    let sharer = original
        .replace("name: persistent", "name: persistent-sharer")
        .replace("ylwg20pyt4vrb3ipxmqm77b6in", "0000000000000000000000abcd");
    let a = dir.path().join("a.yaml");
    let b = dir.path().join("b.yaml");
    let c = dir.path().join("c.yaml");
    fs::write(&a, &original).unwrap();
    fs::write(&b, &twin).unwrap();
    fs::write(&c, &sharer).unwrap();
    let outdir = dir.path().join("deploy");
    let out = run(&[
        "render",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        c.to_str().unwrap(),
        "-o",
        outdir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    // Both conflicts are reported (against whichever file came first).
    assert!(err.contains("identity"), "{err}");
    assert!(err.contains("bucket"), "{err}");
    assert!(!outdir.exists());
}

/// A second fleet made by copying a fleet file (renamed, with its own bucket) keeps the
/// identity: `check` and `render` (both forms) refuse the pair in one run.
#[test]
fn a_copied_fleet_file_is_refused_by_check_and_render() {
    let dir = tempfile::tempdir().unwrap();
    let original = fs::read_to_string(example("persistent.yaml")).unwrap();
    let copy = original
        .replace("name: persistent", "name: persistent-copy")
        .replace("bucket: ledger-cells", "bucket: ledger-copy-cells");
    let a = dir.path().join("a.yaml");
    let b = dir.path().join("b.yaml");
    fs::write(&a, &original).unwrap();
    fs::write(&b, &copy).unwrap();
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let check = run(&["check", a, b]);
    assert_eq!(check.status.code(), Some(1));
    let out = text(&check.stdout) + &text(&check.stderr);
    assert!(
        out.contains("spec.identity: this identity is already used"),
        "{out}"
    );
    let stream = run(&["render", a, b, "--stdout"]);
    assert_eq!(stream.status.code(), Some(1));
    assert!(text(&stream.stdout).is_empty(), "nothing is printed");
    assert!(text(&stream.stderr).contains("identity"));
    // Each alone is fine: only the pair is refused.
    assert_eq!(run(&["check", b]).status.code(), Some(0));
}

#[test]
fn stdout_stream_has_every_object() {
    let ex = example("routing-gateway.yaml");
    let out = run(&["render", ex.to_str().unwrap(), "--stdout"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert_eq!(s.matches("---\n").count(), 9);
    assert!(s.contains("kind: HTTPRoute"));
    assert!(!s.contains("Kustomization"));
}

#[test]
fn check_reports_json_for_tools() {
    let ok = run(&[
        "check",
        example("persistent.yaml").to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(ok.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(v["valid"], true);
    assert_eq!(v["fleets"], 1);

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    fs::write(
        &bad,
        fs::read_to_string(example("persistent.yaml"))
            .unwrap()
            .replace("  members: 3\n", "  members: 3\n  colour: blue\n"),
    )
    .unwrap();
    let out = run(&["check", bad.to_str().unwrap(), "--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], false);
    let d = &v["diagnostics"][0];
    assert!(d["file"].as_str().unwrap().ends_with("bad.yaml"));
    assert!(d["line"].as_u64().unwrap() > 0, "{d}");
    assert!(d["message"].as_str().unwrap().contains("colour"), "{d}");

    let out = run(&["check", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("bad.yaml:"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn schema_describes_the_fleet_file() {
    let out = run(&["schema"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["properties"]["kind"]["const"], "CelldFleet");
    assert!(
        v["properties"]["spec"]["properties"]["identity"].is_object(),
        "{v}"
    );
    assert!(v["properties"]["spec"]["properties"]["storage"].is_object());
}

#[test]
fn crds_are_printed_for_ci() {
    let out = run(&["crds"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let kinds: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["spec"]["names"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["CelldFleet", "CelldBucketReservation"]);
}

#[test]
fn every_command_has_help_with_an_example() {
    for cmd in ["init", "check", "render", "diff", "schema"] {
        let out = run(&[cmd, "--help"]);
        assert!(out.status.success(), "{cmd}");
        let h = text(&out.stdout);
        assert!(h.contains("Examples:"), "{cmd} --help has no example:\n{h}");
    }
    let top = text(&run(&["--help"]).stdout);
    assert!(top.contains("Examples:") && !top.contains("crds"), "{top}");
}

/// `celld-gen install --member-replacement-delay` takes the healer's grammar and bound:
/// what the healer accepts is rendered as the healer reads it; what it refuses is refused
/// here with the healer's message.
#[test]
fn install_takes_the_healers_replacement_delay() {
    let rendered = |delay: &str| {
        let out = run(&["install", "--stdout", "--member-replacement-delay", delay]);
        assert!(out.status.success(), "{delay}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    assert!(rendered("1m30s").contains("- \"--member-replacement-delay=1m30s\"\n"));
    assert!(rendered("1h").contains("- \"--member-replacement-delay=1h\"\n"));
    assert!(rendered("90s").contains("- \"--member-replacement-delay=1m30s\"\n"));
    let out = run(&["install", "--stdout"]);
    assert!(text(&out.stdout).contains("- \"--member-replacement-delay=10m\"\n"));

    let out = run(&["install", "--stdout", "--member-replacement-delay", "30s"]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    assert!(
        text(&out.stderr)
            .contains("error: --member-replacement-delay must be at least 1m, got 30s"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&["install", "--stdout", "--member-replacement-delay", "10"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("\"10\" has no unit"),
        "{}",
        text(&out.stderr)
    );
}

/// Before Kubernetes 1.36 a fleet StatefulSet starts at zero from Git; from 1.36 on it is
/// rendered without replicas (the install bundle's mutating policy starts it at 0).
/// The flag and CELLD_GEN_KUBERNETES_VERSION must agree; an unsupported minor is refused
/// with the supported list and nothing is written.
#[test]
fn the_kubernetes_version_decides_how_a_statefulset_starts() {
    let ex = example("persistent.yaml");
    let ex = ex.to_str().unwrap();
    let sts = |args: &[&str], env: Option<&str>| {
        let mut c = bin();
        c.args(["render", ex, "--stdout"])
            .args(args)
            .env("NO_COLOR", "1");
        match env {
            Some(v) => c.env("CELLD_GEN_KUBERNETES_VERSION", v),
            None => c.env_remove("CELLD_GEN_KUBERNETES_VERSION"),
        };
        let out = c.output().unwrap();
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    };
    let replicas = |s: &str| {
        s.split("---\n")
            .find(|d| d.contains("kind: StatefulSet"))
            .map(|d| d.lines().any(|l| l == "  replicas: 0"))
    };
    for (args, env, zero) in [
        (&[][..], None, false),
        (&["--kubernetes-version", "1.37"][..], None, false),
        (&["--kubernetes-version", "1.36"][..], None, false),
        (&["--kubernetes-version", "1.35"][..], None, true),
        (&["--kubernetes-version", "v1.34.4"][..], None, true),
        (&[][..], Some("1.34"), true),
        (&["--kubernetes-version", "1.34"][..], Some("v1.34.2"), true),
    ] {
        let (ok, out, err) = sts(args, env);
        assert!(ok, "{args:?} {env:?}: {err}");
        assert_eq!(replicas(&out), Some(zero), "{args:?} {env:?}");
    }
    let (ok, out, err) = sts(&["--kubernetes-version", "1.33"], None);
    assert!(!ok && out.is_empty(), "{out}");
    assert!(
        err.contains("Kubernetes 1.33 is not supported by this celld-gen: supported are 1.34, 1.35, 1.36, 1.37"),
        "{err}"
    );
    let (ok, _, err) = sts(&["--kubernetes-version", "1.35"], Some("1.37"));
    assert!(
        !ok && err.contains("disagrees with CELLD_GEN_KUBERNETES_VERSION=1.37"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = bin()
        .args(["install", "--kubernetes-version", "1.38", "-o"])
        .arg(dir.path().join("cluster"))
        .env_remove("CELLD_GEN_KUBERNETES_VERSION")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("supported are 1.34, 1.35, 1.36, 1.37"));
    assert!(!dir.path().join("cluster").exists(), "nothing written");
}
