//! The binary never loses a fleet without saying so: near-miss files are errors, skipped
//! files are listed, removals and empty renders need a flag, inputs are found sensibly,
//! and dangerous edits are named. Also the messages and the schema (issue 10, §1 and §3).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_celld-gen"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

/// Runs in `dir`, so paths in messages are short and relative.
fn run_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_celld-gen"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn example(name: &str) -> String {
    let p: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    fs::read_to_string(p).unwrap()
}

/// A temp dir with `fleets/persistent.yaml` and `fleets/bucket-deployment.yaml`.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("fleets")).unwrap();
    for f in ["persistent.yaml", "bucket-deployment.yaml"] {
        fs::write(dir.path().join("fleets").join(f), example(f)).unwrap();
    }
    dir
}

#[test]
fn near_miss_files_in_a_directory_are_errors_with_a_position() {
    let dir = workspace();
    let f = dir.path().join("fleets");
    let p = example("persistent.yaml");
    fs::write(
        f.join("typo.yaml"),
        p.replace("kind: CelldFleet", "kind: CelldFleets")
            .replace("name: persistent", "name: typo"),
    )
    .unwrap();
    fs::write(
        f.join("lower.yaml"),
        p.replace("kind: CelldFleet", "kind: celldfleet"),
    )
    .unwrap();
    fs::write(f.join("nokind.yaml"), p.replace("kind: CelldFleet\n", "")).unwrap();
    fs::write(f.join("empty.yaml"), "").unwrap();
    fs::write(f.join("comments.yml"), "# nothing here yet\n\n").unwrap();
    fs::write(
        f.join("reservation.yaml"),
        "apiVersion: fleet.celld.dev/v1alpha1\nkind: CelldBucketReservation\n",
    )
    .unwrap();
    fs::write(
        f.join("configmap.yaml"),
        "apiVersion: v1\nkind: ConfigMap\n",
    )
    .unwrap();
    fs::write(f.join("notes.txt"), "hello\n").unwrap();

    let out = run_in(dir.path(), &["check", "fleets"]);
    assert_eq!(out.status.code(), Some(1));
    let o = text(&out.stdout);
    for want in [
        "fleets/typo.yaml:4:7: kind: kind `CelldFleets` is not `CelldFleet`",
        "fleets/lower.yaml:4:7: kind: kind `celldfleet` is not `CelldFleet`",
        "fleets/nokind.yaml:3:1: kind: no `kind`, but this looks like a fleet",
        "fleets/empty.yaml:1:1: the file is empty",
        "fleets/comments.yml:1:1: the file is empty",
        "fleets/reservation.yaml:2:7: kind: a `fleet.celld.dev` document of kind `CelldBucketReservation` is not a fleet file",
    ] {
        assert!(o.contains(want), "missing {want:?} in:\n{o}");
    }
    assert!(!o.contains(":0:0:"), "{o}");
    assert!(!o.contains("configmap"), "{o}");

    // Other files are skipped, and listed with -v and in JSON.
    for name in [
        "typo.yaml",
        "lower.yaml",
        "nokind.yaml",
        "empty.yaml",
        "comments.yml",
        "reservation.yaml",
    ] {
        fs::remove_file(f.join(name)).unwrap();
    }
    let out = run_in(dir.path(), &["check", "fleets", "-v"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let e = text(&out.stderr);
    assert!(
        e.contains("skipped fleets/configmap.yaml: kind `ConfigMap` is not CelldFleet"),
        "{e}"
    );
    assert!(
        e.contains("skipped fleets/notes.txt: not a .yaml or .yml file"),
        "{e}"
    );
    assert!(e.contains("2 fleets valid"), "{e}");
    let quiet = run_in(dir.path(), &["check", "fleets"]);
    assert!(!text(&quiet.stderr).contains("skipped"));

    let out = run_in(dir.path(), &["check", "fleets", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], true);
    let skipped = v["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 2, "{v}");
    assert_eq!(skipped[0]["path"], "fleets/configmap.yaml");
    assert_eq!(skipped[0]["reason"], "kind `ConfigMap` is not CelldFleet");
}

#[test]
fn a_named_file_without_a_fleet_is_an_error_at_1_1() {
    let dir = workspace();
    fs::write(dir.path().join("cm.yaml"), "kind: ConfigMap\n").unwrap();
    let out = run_in(dir.path(), &["check", "cm.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    let o = text(&out.stdout);
    assert!(
        o.starts_with("cm.yaml:1:1: no CelldFleet found in this file (kind `ConfigMap`"),
        "{o}"
    );
    let out = run_in(dir.path(), &["check", "missing.yaml"]);
    assert!(
        text(&out.stdout).contains("missing.yaml:1:1: no such file or directory"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn render_refuses_zero_fleets_unless_allow_empty() {
    let dir = workspace();
    fs::create_dir(dir.path().join("docs")).unwrap();
    fs::write(dir.path().join("docs/readme.yaml"), "title: docs\n").unwrap();
    let out = run_in(dir.path(), &["render", "docs", "-o", "deploy"]);
    assert_eq!(out.status.code(), Some(1));
    let e = text(&out.stderr);
    assert!(
        e.contains("no fleet found in docs; refusing to render zero fleets into deploy")
            && e.contains("--allow-empty")
            && e.contains("nothing was written"),
        "{e}"
    );
    assert!(!dir.path().join("deploy").exists());
    let out = run_in(dir.path(), &["render", "docs", "--stdout"]);
    assert_eq!(out.status.code(), Some(1));
    let out = run_in(
        dir.path(),
        &["render", "docs", "-o", "deploy", "--allow-empty"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(dir.path().join("deploy/kustomization.yaml").is_file());
}

/// An example fleet file with deletion protection off.
fn unprotected(name: &str) -> String {
    format!("{}  deletionProtection: false\n", example(name))
}

#[test]
fn removing_a_fleet_folder_needs_allow_removal() {
    let dir = workspace();
    for f in ["persistent.yaml", "bucket-deployment.yaml"] {
        fs::write(dir.path().join("fleets").join(f), unprotected(f)).unwrap();
    }
    let out = run_in(dir.path(), &["render", "fleets", "-o", "deploy"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let before = fs::read_to_string(dir.path().join("deploy/kustomization.yaml")).unwrap();
    fs::remove_file(dir.path().join("fleets/bucket-deployment.yaml")).unwrap();

    let out = run_in(dir.path(), &["render", "fleets", "-o", "deploy"]);
    assert_eq!(out.status.code(), Some(1));
    let e = text(&out.stderr);
    assert!(
        e.contains("render would remove 1 fleet folder from deploy: shop/bucket-deployment")
            && e.contains("--allow-removal"),
        "{e}"
    );
    assert_eq!(
        fs::read_to_string(dir.path().join("deploy/kustomization.yaml")).unwrap(),
        before
    );

    let out = run_in(dir.path(), &["diff", "fleets", "-o", "deploy"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("shop/bucket-deployment"),
        "{}",
        text(&out.stderr)
    );
    let out = run_in(
        dir.path(),
        &[
            "diff",
            "fleets",
            "-o",
            "deploy",
            "--allow-removal",
            "--name-only",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("removed shop/bucket-deployment/deployment.yaml"));
    assert!(
        text(&out.stderr).contains("note: shop/bucket-deployment: deleted"),
        "{}",
        text(&out.stderr)
    );

    // Zero fleets into a full output names every fleet that would go.
    fs::remove_file(dir.path().join("fleets/persistent.yaml")).unwrap();
    let out = run_in(dir.path(), &["render", "fleets", "-o", "deploy"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(
            "which would remove every fleet in it (ledger/persistent, shop/bucket-deployment)"
        ),
        "{}",
        text(&out.stderr)
    );

    fs::write(
        dir.path().join("fleets/persistent.yaml"),
        unprotected("persistent.yaml"),
    )
    .unwrap();
    let out = run_in(
        dir.path(),
        &["render", "fleets", "-o", "deploy", "--allow-removal"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!dir.path().join("deploy/shop").exists());
}

/// A fleet whose last render has deletion protection on is never removed from the
/// output, not even with --allow-removal: `render`, `diff` and `check` name the safe
/// order, and once protection off is rendered (and synced), the removal goes through.
#[test]
fn removing_a_protected_fleet_needs_protection_off_first() {
    let dir = workspace();
    let out = run_in(dir.path(), &["render", "fleets", "-o", "deploy"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let before = fs::read_to_string(dir.path().join("deploy/kustomization.yaml")).unwrap();
    fs::remove_file(dir.path().join("fleets/bucket-deployment.yaml")).unwrap();
    for allow in [false, true] {
        let mut args = vec!["render", "fleets", "-o", "deploy"];
        if allow {
            args.push("--allow-removal");
        }
        let out = run_in(dir.path(), &args);
        assert_eq!(out.status.code(), Some(1), "--allow-removal {allow}");
        let e = text(&out.stderr);
        assert!(
            e.contains("render would remove 1 fleet folder from deploy with deletion protection on in their last render: shop/bucket-deployment")
                && e.contains("set `deletionProtection: false` in its file, render, and let Argo CD or Flux sync that first; then remove the file")
                && e.contains("nothing was written"),
            "{e}"
        );
        assert_eq!(
            fs::read_to_string(dir.path().join("deploy/kustomization.yaml")).unwrap(),
            before
        );
    }
    let out = run_in(
        dir.path(),
        &["diff", "fleets", "-o", "deploy", "--allow-removal"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let e = text(&out.stderr);
    assert!(
        e.contains("danger: shop/bucket-deployment: spec.deletionProtection: deleted while its deletion protection is on")
            && e.contains("with deletion protection on in their last render"),
        "{e}"
    );
    let out = run_in(
        dir.path(),
        &["check", "fleets", "--against", "deploy", "--allow-removal"],
    );
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("shop/bucket-deployment: spec.deletionProtection: deleted while its deletion protection is on"),
        "{said}"
    );

    // The safe order: protection off, rendered (and synced), then the removal.
    fs::write(
        dir.path().join("fleets/bucket-deployment.yaml"),
        unprotected("bucket-deployment.yaml"),
    )
    .unwrap();
    let out = run_in(dir.path(), &["render", "fleets", "-o", "deploy"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    fs::remove_file(dir.path().join("fleets/bucket-deployment.yaml")).unwrap();
    let out = run_in(
        dir.path(),
        &["render", "fleets", "-o", "deploy", "--allow-removal"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!dir.path().join("deploy/shop").exists());

    // A folder whose last render cannot be read is taken as protected.
    fs::create_dir_all(dir.path().join("deploy/ops/lost")).unwrap();
    fs::write(
        dir.path().join("deploy/ops/lost/celldfleet.yaml"),
        "not: [a fleet",
    )
    .unwrap();
    let out = run_in(
        dir.path(),
        &["render", "fleets", "-o", "deploy", "--allow-removal"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("ops/lost"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn inputs_are_resolved_deduplicated_and_never_read_from_output() {
    let dir = workspace();
    // A file named twice, once through its directory, is one fleet.
    let out = run_in(
        dir.path(),
        &[
            "check",
            "fleets",
            "fleets/persistent.yaml",
            "./fleets/../fleets",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("2 fleets valid"));

    // Output inside the input directory is never read back, as -o or as a copy.
    let out = run_in(dir.path(), &["render", "fleets", "-o", "fleets/deploy"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = run_in(
        dir.path(),
        &["render", "fleets", "-o", "fleets/deploy", "-v"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr)
            .contains("skipped fleets/deploy: the output directory (-o) is never read as input"),
        "{}",
        text(&out.stderr)
    );
    copy_tree(
        &dir.path().join("fleets/deploy"),
        &dir.path().join("fleets/old-copy"),
    );
    let out = run_in(dir.path(), &["check", "fleets", "-v"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let e = text(&out.stderr);
    assert!(
        e.contains("skipped fleets/old-copy: celld-gen output (its kustomization.yaml carries the generated header)"),
        "{e}"
    );
    assert!(e.contains("2 fleets valid"), "{e}");
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[cfg(unix)]
#[test]
fn directory_symlinks_are_not_followed_and_loops_are_one_error() {
    use std::os::unix::fs::symlink;
    let dir = workspace();
    fs::create_dir(dir.path().join("elsewhere")).unwrap();
    fs::write(
        dir.path().join("elsewhere/other.yaml"),
        example("bucket-ordered.yaml"),
    )
    .unwrap();
    symlink(
        dir.path().join("elsewhere"),
        dir.path().join("fleets/linked"),
    )
    .unwrap();
    // A link to its own parent: followed, it would never end.
    symlink(dir.path().join("fleets"), dir.path().join("fleets/self")).unwrap();
    let out = run_in(dir.path(), &["check", "fleets", "-v"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let e = text(&out.stderr);
    assert!(e.contains("2 fleets valid"), "{e}");
    assert!(
        e.contains("skipped fleets/linked: symbolic link to a directory, not followed"),
        "{e}"
    );
    assert!(e.contains("skipped fleets/self: symbolic link"), "{e}");

    symlink("loop-b.yaml", dir.path().join("loop-a.yaml")).unwrap();
    symlink("loop-a.yaml", dir.path().join("loop-b.yaml")).unwrap();
    let out = run_in(dir.path(), &["check", "loop-a.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    let o = text(&out.stdout);
    assert_eq!(o.lines().count(), 1, "one error for one loop:\n{o}");
    assert!(
        o.starts_with(
            "loop-a.yaml:1:1: symbolic link loop (loop-a.yaml -> loop-b.yaml -> loop-a.yaml)"
        ),
        "{o}"
    );
    // Found in a directory, a loop of two links is still one error.
    fs::create_dir(dir.path().join("looped")).unwrap();
    symlink("y.yaml", dir.path().join("looped/x.yaml")).unwrap();
    symlink("x.yaml", dir.path().join("looped/y.yaml")).unwrap();
    let out = run_in(dir.path(), &["check", "looped"]);
    assert_eq!(out.status.code(), Some(1));
    let o = text(&out.stdout);
    assert_eq!(o.lines().count(), 1, "{o}");
    assert!(
        o.contains("symbolic link loop (x.yaml -> y.yaml -> x.yaml)"),
        "{o}"
    );
}

/// Renders `fleets` into `deploy`, then applies `edit` to the persistent fleet's file.
fn rendered_then_edited(edit: impl Fn(String) -> String) -> tempfile::TempDir {
    let dir = workspace();
    let out = run_in(dir.path(), &["render", "fleets", "-o", "deploy"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let p = dir.path().join("fleets/persistent.yaml");
    fs::write(&p, edit(fs::read_to_string(&p).unwrap())).unwrap();
    dir
}

/// A new fleet file that reuses a committed fleet's bucket is the one blamed, even when
/// it sorts before the untouched file: against the committed render, the new or changed
/// fleet is reported (without a render to compare, the later file is).
#[test]
fn a_collision_is_blamed_on_the_file_that_changed() {
    let dir = rendered_then_edited(|s| s);
    let copy = fs::read_to_string(dir.path().join("fleets/persistent.yaml"))
        .unwrap()
        .replace("name: persistent", "name: aa-copy")
        .replace("ylwg20pyt4vrb3ipxmqm77b6in", "aaaaaaaaaaaaaaaaaaaaaaaaaa");
    fs::write(dir.path().join("fleets/aa-copy.yaml"), copy).unwrap();
    for args in [
        &["check", "fleets", "--against", "deploy"][..],
        &["render", "fleets", "-o", "deploy"][..],
    ] {
        let out = run_in(dir.path(), args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(
            all.contains("fleets/aa-copy.yaml:") && all.contains("spec.storage.bucket: bucket `ledger-cells` overlaps the storage of the fleet in fleets/persistent.yaml"),
            "{args:?}: {all}"
        );
        assert!(!all.contains("fleets/persistent.yaml:"), "{args:?}: {all}");
    }
}

#[test]
fn check_against_names_immutable_changes_and_what_to_do() {
    let dir = rendered_then_edited(|s| {
        s.replace("bucket: ledger-cells", "bucket: ledger-cells-v2")
            .replace(
                "zones: [us-east-1a, us-east-1b, us-east-1c]",
                "zones: [us-east-1a, us-east-1b, us-east-1d]",
            )
    });
    let out = run_in(dir.path(), &["check", "fleets", "--against", "deploy"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let o = text(&out.stdout);
    assert!(
        // At the field's line and column, as validation problems are.
        o.contains("fleets/persistent.yaml:15:13: ledger/persistent: spec.storage.bucket: changed from `ledger-cells` to `ledger-cells-v2`")
            && o.contains("the API server refuses the change, so the Argo CD or Flux sync fails")
            && o.contains("Instead: revert the change"),
        "{o}"
    );
    assert!(o.contains("spec.placement.zones: changed from"), "{o}");
    assert!(
        text(&out.stderr).contains("2 fleets valid, but 2 dangerous edits against deploy"),
        "{}",
        text(&out.stderr)
    );
    // GitHub annotations and JSON findings point at the field too.
    let out = run_in(
        dir.path(),
        &[
            "check",
            "fleets",
            "--against",
            "deploy",
            "--format",
            "github",
        ],
    );
    let o = text(&out.stdout);
    assert!(
        o.contains("::error file=fleets/persistent.yaml,line=15,col=13,"),
        "{o}"
    );
    let out = run_in(
        dir.path(),
        &["check", "fleets", "--against", "deploy", "--format", "json"],
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let bucket = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["field"] == "spec.storage.bucket")
        .unwrap();
    assert_eq!(
        (bucket["line"].as_u64(), bucket["column"].as_u64()),
        (Some(15), Some(13))
    );
    // Without --against, the same fleets are valid.
    let out = run_in(dir.path(), &["check", "fleets"]);
    assert_eq!(out.status.code(), Some(0));
    // --against needs a render output.
    let out = run_in(dir.path(), &["check", "fleets", "--against", "fleets"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains(
            "error: --against fleets: fleets exists and is not a celld-gen output directory"
        ),
        "{}",
        text(&out.stderr)
    );
    // JSON carries the findings.
    let out = run_in(
        dir.path(),
        &["check", "fleets", "--against", "deploy", "--format", "json"],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], false);
    assert_eq!(v["findings"][0]["kind"], "immutable");
    assert_eq!(v["findings"][0]["field"], "spec.placement.zones");
    // render warns (the sync will fail), but writes: the edit is in Git either way.
    let out = run_in(dir.path(), &["render", "fleets", "-o", "deploy"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("warning: ledger/persistent: spec.storage.bucket: changed from"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn identity_changes_renames_and_workload_switches_are_named() {
    let dir = rendered_then_edited(|s| {
        s.replace("ylwg20pyt4vrb3ipxmqm77b6in", "0000000000000000000000abcd")
    });
    let out = run_in(dir.path(), &["check", "fleets", "--against", "deploy"]);
    assert_eq!(out.status.code(), Some(1));
    let o = text(&out.stdout);
    assert!(
        o.contains("spec.identity: changed from `ylwg20pyt4vrb3ipxmqm77b6in` to `0000000000000000000000abcd`: the identity is the workload's selector"),
        "{o}"
    );

    // A rename keeps the identity: a new fleet and a deleted one.
    let dir = rendered_then_edited(|s| s.replace("name: persistent", "name: persistent-v2"));
    let out = run_in(
        dir.path(),
        &["check", "fleets", "--against", "deploy", "--allow-removal"],
    );
    assert_eq!(out.status.code(), Some(1));
    let o = text(&out.stdout);
    assert!(
        o.contains("fleets/persistent.yaml:6:9: ledger/persistent: metadata.name: renamed to ledger/persistent-v2 with the same identity: to Kubernetes this is a new fleet and a deleted one"),
        "{o}"
    );

    // Deployment to StatefulSet: the workload is replaced.
    let dir = workspace();
    run_in(dir.path(), &["render", "fleets", "-o", "deploy"]);
    let p = dir.path().join("fleets/bucket-deployment.yaml");
    let s = fs::read_to_string(&p).unwrap();
    assert!(s.contains("profile: Bucket\n"));
    fs::write(
        &p,
        s.replace(
            "profile: Bucket\n",
            "profile: Bucket\n  bucketWorkload: Ordered\n",
        ),
    )
    .unwrap();
    let out = run_in(
        dir.path(),
        &["diff", "fleets", "-o", "deploy", "--name-only"],
    );
    assert_eq!(out.status.code(), Some(1));
    let e = text(&out.stderr);
    assert!(
        e.contains("danger: shop/bucket-deployment: spec.bucketWorkload: the workload changes from a Deployment to a StatefulSet"),
        "{e}"
    );
    assert!(e.contains("with 1 dangerous edit"), "{e}");
}

#[test]
fn diff_format_json_lists_changes_and_findings() {
    let dir = rendered_then_edited(|s| s.replace("sizeGiB: 20", "sizeGiB: 40"));
    let out = run_in(
        dir.path(),
        &["diff", "fleets", "-o", "deploy", "--format", "json"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["upToDate"], false);
    assert_eq!(v["output"], "deploy");
    assert!(v["refused"].is_null());
    let changes: Vec<(String, String)> = v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_owned(),
                c["change"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(changes.contains(&(
        "ledger/persistent/statefulset.yaml".into(),
        "changed".into()
    )));
    assert_eq!(v["findings"][0]["field"], "spec.storage.sizeGiB");
    assert_eq!(v["findings"][0]["kind"], "immutable");

    // Up to date; and a refusal is reported in the document, with exit 2.
    let dir = workspace();
    run_in(dir.path(), &["render", "fleets", "-o", "deploy"]);
    let out = run_in(
        dir.path(),
        &["diff", "fleets", "-o", "deploy", "--format", "json"],
    );
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["upToDate"], true);
    assert_eq!(v["changes"], serde_json::json!([]));
    fs::remove_file(dir.path().join("fleets/persistent.yaml")).unwrap();
    let out = run_in(
        dir.path(),
        &["diff", "fleets", "-o", "deploy", "--format", "json"],
    );
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["refused"].as_str().unwrap().contains("ledger/persistent"),
        "{v}"
    );
    // The example keeps deletion protection on (its default).
    assert_eq!(v["findings"][0]["kind"], "deleted-while-protected");
}

fn check_text(name: &str, contents: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join(name), contents).unwrap();
    let out = run_in(dir.path(), &["check", name]);
    assert_eq!(out.status.code(), Some(1));
    text(&out.stdout)
}

#[test]
fn messages_suggest_locate_and_hint() {
    let p = example("persistent.yaml");
    let o = check_text(
        "typo.yaml",
        p.replace("  members: 3", "  membres: 3").as_bytes(),
    );
    assert!(
        o.contains(
            "typo.yaml:12:3: spec.membres: unknown field `membres`; did you mean `members`?"
        ),
        "{o}"
    );
    let o = check_text(
        "dup.yaml",
        p.replace("  members: 3\n", "  members: 3\n  members: 4\n")
            .as_bytes(),
    );
    assert!(
        o.contains("dup.yaml:13:3: spec.members: duplicate key `members`: it first appears at line 12, column 3"),
        "{o}"
    );
    let mut bytes = p.clone().into_bytes();
    let at = p.find("ledger-cells").unwrap();
    bytes[at + 2] = 0xff;
    let o = check_text("latin1.yaml", &bytes);
    assert!(
        o.contains(&format!(
            "latin1.yaml:15:15: invalid UTF-8 at byte offset {}",
            at + 2
        )),
        "{o}"
    );
    let o = check_text(
        "helm.yaml",
        p.replace("  members: 3", "  members: \"{{ .Values.members }}\"")
            .as_bytes(),
    );
    assert!(
        o.contains(
            "spec.members: `{{ .Values.members }}` is a string; fleet files are not templates"
        ),
        "{o}"
    );
    let o = check_text(
        "helm2.yaml",
        p.replace("  members: 3", "  members: {{ .Values.members }}")
            .as_bytes(),
    );
    assert!(o.contains("fleet files are not templates"), "{o}");
    // An expectation is a type and range, said once; a description is an aside.
    let o = check_text(
        "int.yaml",
        p.replace("  members: 3", "  members: three").as_bytes(),
    );
    assert!(
        o.contains("spec.members: `three` is a string (expected an integer from 1 to 100)"),
        "{o}"
    );
    assert_eq!(o.matches("integer").count(), 1, "{o}");
    let start = p.find("  storage:").unwrap();
    let end = p.find("  placement:").unwrap();
    let o = check_text(
        "nostorage.yaml",
        format!("{}{}", &p[..start], &p[end..]).as_bytes(),
    );
    assert!(
        o.contains("spec.storage: missing required field `storage` (the bucket the fleet shares, and the members' disks) (expected a mapping with `bucket`, `region`)"),
        "{o}"
    );
    assert!(!o.contains("expected The"), "{o}");
}

#[test]
fn schema_carries_bounds_patterns_and_defaults() {
    let out = run(&["schema"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let spec = &v["properties"]["spec"]["properties"];
    assert_eq!(spec["members"]["minimum"], 1);
    assert_eq!(spec["members"]["maximum"], 100);
    assert_eq!(spec["members"]["default"], 3);
    assert_eq!(spec["deletionProtection"]["default"], true);
    assert!(spec["identity"]["pattern"].is_string());
    assert!(
        v["definitions"]["Execution"]["properties"]["cpuRequest"]["pattern"].is_string(),
        "{v}"
    );
    assert_eq!(
        v["definitions"]["Execution"]["properties"]["cpuRequest"]["default"],
        "250m"
    );
    assert_eq!(
        v["definitions"]["Storage"]["properties"]["sizeGiB"]["default"],
        10
    );
    assert_eq!(spec["placement"]["properties"]["mode"]["default"], "Strict");
    assert_eq!(
        spec["capacity"]["properties"]["scaleInCooldownSeconds"]["default"],
        900
    );
    assert_eq!(
        v["properties"]["metadata"]["properties"]["name"]["maxLength"],
        40
    );
}

#[test]
fn init_writes_the_modeline_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "init",
        "orders",
        "-n",
        "shop",
        "--profile",
        "Bucket",
        "--bucket",
        "shop-orders",
        "--region",
        "us-east-1",
        "--zones",
        "a,b,c",
        "--image",
        "ghcr.io/ewhauser/celld@sha256:1c0d854cd2af39fa439f163d5b88a19c7bccefd25fe35e2c0e1f43b3d886f424",
    ];
    let out = run_in(dir.path(), &args);
    assert!(
        text(&out.stdout).starts_with("# yaml-language-server: $schema=./celldfleet.schema.json\n")
    );
    let mut with_o = args.to_vec();
    with_o.extend(["-o", "orders.yaml"]);
    let out = run_in(dir.path(), &with_o);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    let written = fs::read_to_string(dir.path().join("orders.yaml")).unwrap();
    assert!(written.starts_with("# yaml-language-server: $schema="));
    let out = run_in(dir.path(), &["check", "orders.yaml"]);
    assert_eq!(out.status.code(), Some(0));

    let out = run_in(dir.path(), &with_o);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .contains("orders.yaml already exists; init never overwrites a fleet file"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        fs::read_to_string(dir.path().join("orders.yaml")).unwrap(),
        written
    );

    let mut url = args.to_vec();
    url.extend(["--schema", "https://example.com/celldfleet.json"]);
    let out = run_in(dir.path(), &url);
    assert!(
        text(&out.stdout)
            .starts_with("# yaml-language-server: $schema=https://example.com/celldfleet.json\n")
    );
}

#[test]
fn help_teaches_the_new_flags() {
    for (cmd, flags) in [
        ("check", &["--against", "--allow-removal", "--verbose"][..]),
        (
            "render",
            &["--allow-removal", "--allow-empty", "--verbose"][..],
        ),
        (
            "diff",
            &["--allow-removal", "--allow-empty", "--format", "--verbose"][..],
        ),
        (
            "init",
            &["--output", "--schema", "yaml-language-server"][..],
        ),
    ] {
        let h = text(&run(&[cmd, "--help"]).stdout);
        for f in flags {
            assert!(h.contains(f), "{cmd} --help lacks {f}:\n{h}");
        }
    }
}

/// Dangerous edits fail every report format, a refused `diff` names a rename for what it
/// is, and `check` on no fleet at all fails unless --allow-empty.
#[test]
fn every_check_format_and_a_refused_diff_name_the_dangerous_edit() {
    let dir =
        rendered_then_edited(|s| s.replace("bucket: ledger-cells", "bucket: ledger-cells-v2"));
    let out = run_in(
        dir.path(),
        &[
            "check",
            "fleets",
            "--against",
            "deploy",
            "--format",
            "junit",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let x = text(&out.stdout);
    assert!(x.contains("failures=\"1\""), "{x}");
    assert!(
        x.contains("name=\"fleets/persistent.yaml\"")
            && x.contains("spec.storage.bucket: changed from"),
        "{x}"
    );
    let out = run_in(
        dir.path(),
        &[
            "check",
            "fleets",
            "--against",
            "deploy",
            "--format",
            "github",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let g = text(&out.stdout);
    assert!(
        g.starts_with("::error file=fleets/persistent.yaml,") && g.contains("spec.storage.bucket"),
        "{g}"
    );

    // A rename, refused by diff: the refusal says it is a rename.
    let dir = rendered_then_edited(|s| s.replace("name: persistent", "name: persistent-v2"));
    let out = run_in(dir.path(), &["diff", "fleets", "-o", "deploy"]);
    assert_eq!(out.status.code(), Some(2));
    let e = text(&out.stderr);
    assert!(
        e.contains("renamed to ledger/persistent-v2 with the same identity")
            && e.contains("error: render would remove 1 fleet folder"),
        "{e}"
    );

    // No fleet at all.
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("empty")).unwrap();
    let out = run_in(dir.path(), &["check", "empty"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("no fleet found"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stderr).contains("--allow-empty"),
        "{}",
        text(&out.stderr)
    );
    let out = run_in(dir.path(), &["check", "empty", "--allow-empty"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}
