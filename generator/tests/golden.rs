//! Golden tests: every example in `examples/` renders to exactly the files in `golden/`,
//! byte for byte. On purpose changes, regenerate with
//! `CELLD_UPDATE_GOLDEN=1 cargo test -p celld-gen --test golden`
//! (or `scripts/render-examples.sh`), and review the diff before committing.

use std::path::{Path, PathBuf};

use celld_gen::load::load_paths;
use celld_gen::output::diff::{changes, write_unified};
use celld_gen::output::write_tree;
use celld_gen::render::{Bundle, ObjectKind, render_all, roundtrip};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn example_paths() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(root().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    assert!(
        paths.len() >= 9,
        "expected at least 9 examples, found {paths:?}"
    );
    paths
}

fn render(paths: &[PathBuf]) -> Bundle {
    let fleets = load_paths(paths).unwrap_or_else(|d| {
        panic!(
            "examples do not load:\n{}",
            d.iter().map(|d| format!("  {d}\n")).collect::<String>()
        )
    });
    render_all(&fleets).unwrap_or_else(|d| {
        panic!(
            "examples do not render:\n{}",
            d.iter().map(|d| format!("  {d}\n")).collect::<String>()
        )
    })
}

#[test]
fn golden_output_matches_byte_for_byte() {
    let bundle = render(&example_paths());
    let golden = root().join("golden");
    if std::env::var_os("CELLD_UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        write_tree(&golden, &bundle).unwrap();
        eprintln!("golden/ regenerated ({} files)", bundle.files.len());
        return;
    }
    let diff = changes(&golden, &bundle).unwrap();
    if !diff.is_empty() {
        let mut text = Vec::new();
        write_unified(&diff, &mut text).unwrap();
        let text = anstream::adapter::strip_str(std::str::from_utf8(&text).unwrap()).to_string();
        panic!(
            "golden/ does not match the rendering of examples/ ({} files differ).\n\
             If the change is intended, run `CELLD_UPDATE_GOLDEN=1 cargo test -p celld-gen --test golden` \
             and review the result.\n\n{text}",
            diff.len()
        );
    }
}

#[test]
fn every_example_has_a_golden_folder_named_after_it() {
    // Each example's fleet is named after its file, so golden/<namespace>/<example>/.
    let bundle = render(&example_paths());
    for p in example_paths() {
        let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
        assert!(
            bundle.fleets.iter().any(|f| f.name == stem),
            "no fleet named {stem} (from {})",
            p.display()
        );
    }
}

#[test]
fn every_golden_object_round_trips_through_its_typed_form() {
    let bundle = render(&example_paths());
    let mut checked = 0;
    for f in &bundle.files {
        if f.path.ends_with("kustomization.yaml") {
            continue;
        }
        let file = f.path.rsplit('/').next().unwrap();
        let kind = match file {
            "celldbucketreservation.yaml" => ObjectKind::CelldBucketReservation,
            "celldfleet.yaml" => ObjectKind::CelldFleet,
            "networkpolicy.yaml" | "networkpolicy-routing.yaml" => ObjectKind::NetworkPolicy,
            "poddisruptionbudget.yaml" => ObjectKind::PodDisruptionBudget,
            "service.yaml" | "service-peers.yaml" => ObjectKind::Service,
            "deployment.yaml" => ObjectKind::Deployment,
            "statefulset.yaml" => ObjectKind::StatefulSet,
            "httproute.yaml" => ObjectKind::HttpRoute,
            "ingress.yaml" => ObjectKind::Ingress,
            other => panic!("unexpected file {other}"),
        };
        roundtrip::check(kind, &f.contents).unwrap_or_else(|e| panic!("{}: {e}", f.path));
        // The render path reads objects back with our strict reader; a second,
        // independent YAML parser must read exactly the same thing.
        let ours = celld_gen::render::parse::parse_document(&f.contents).unwrap();
        let theirs: serde_json::Value = serde_saphyr::from_str(&f.contents).unwrap();
        assert_eq!(ours, theirs, "{}: the two YAML readers disagree", f.path);
        checked += 1;
    }
    assert_eq!(checked, bundle.object_count());
}

#[test]
fn the_rendered_fleet_is_the_fleet_as_written() {
    // celldfleet.yaml parses back to exactly the fleet that was loaded: nothing defaulted,
    // nothing dropped.
    let paths = example_paths();
    let fleets = load_paths(&paths).unwrap();
    let bundle = render_all(&fleets).unwrap();
    for loaded in &fleets {
        let ns = loaded.fleet.metadata.namespace.as_deref().unwrap();
        let name = loaded.fleet.metadata.name.as_deref().unwrap();
        let file = bundle
            .files
            .iter()
            .find(|f| f.path == format!("{ns}/{name}/celldfleet.yaml"))
            .unwrap();
        let back: celld_gen::api::CelldFleet = serde_saphyr::from_str(&file.contents).unwrap();
        assert_eq!(back.spec, loaded.fleet.spec, "{ns}/{name}");
        assert_eq!(back.metadata.labels, loaded.fleet.metadata.labels);
        // The one addition: the GitOps guards, so no prune deletes a fleet silently.
        let annotations = back.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations,
            celld_gen::render::context::fleet_annotations(
                loaded.fleet.metadata.annotations.as_ref(),
                loaded.fleet.spec.capacity_mode() == Some(celld_gen::api::CapacityMode::External)
            ),
            "{ns}/{name}"
        );
        assert_eq!(
            annotations[celld_gen::api::labels::ARGOCD_SYNC_OPTIONS],
            "Prune=confirm,Delete=confirm"
        );
        assert_eq!(annotations[celld_gen::api::labels::FLUX_PRUNE], "disabled");
    }
}

#[test]
fn output_is_independent_of_input_order_and_repeatable() {
    let paths = example_paths();
    let a = render(&paths);
    let mut reversed = paths.clone();
    reversed.reverse();
    let b = render(&reversed);
    assert_eq!(a, b);
    let c = render(&paths);
    assert_eq!(a.files, c.files);
    assert_eq!(a.stream(), b.stream());
}

#[test]
fn the_stream_holds_every_object_once_in_order() {
    let bundle = render(&example_paths());
    let stream = bundle.stream();
    let docs: Vec<&str> = stream.split("---\n").filter(|d| !d.is_empty()).collect();
    assert_eq!(docs.len(), bundle.object_count());
    let objects: Vec<&str> = bundle
        .fleets
        .iter()
        .flat_map(|f| f.objects.iter().map(|o| o.yaml.as_str()))
        .collect();
    assert_eq!(docs, objects);
    // Every document is a mapping with apiVersion and kind.
    for d in docs {
        let v: serde_json::Value = serde_saphyr::from_str(d).unwrap();
        assert!(v["apiVersion"].is_string() && v["kind"].is_string(), "{d}");
    }
}

#[test]
fn kustomizations_list_their_resources_sorted() {
    let bundle = render(&example_paths());
    for f in bundle
        .files
        .iter()
        .filter(|f| f.path.ends_with("kustomization.yaml"))
    {
        let v: serde_json::Value = serde_saphyr::from_str(&f.contents).unwrap();
        let resources: Vec<String> = v["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap().to_owned())
            .collect();
        let mut sorted = resources.clone();
        sorted.sort();
        assert_eq!(resources, sorted, "{}", f.path);
        let dir = f.path.trim_end_matches("kustomization.yaml");
        for r in &resources {
            let target = format!("{dir}{r}");
            assert!(
                bundle
                    .files
                    .iter()
                    .any(|g| g.path == target || g.path.starts_with(&format!("{target}/"))),
                "{} lists {r}, which is not rendered",
                f.path
            );
        }
    }
}

#[test]
fn rendering_the_rendered_fleets_reproduces_the_output() {
    // celldfleet.yaml is the fleet file as written, so the rendered fleet files, named
    // one by one, render to exactly the same tree. (The output folder itself is never
    // searched for input: it carries the generated header.)
    let bundle = render(&example_paths());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("deploy");
    write_tree(&out, &bundle).unwrap();
    let mut rendered: Vec<PathBuf> = bundle
        .files
        .iter()
        .filter(|f| f.path.ends_with("/celldfleet.yaml"))
        .map(|f| out.join(&f.path))
        .collect();
    // Patches live beside the fleet file, not in the CelldFleet: the examples' patch
    // documents go with the rendered fleets, each in a file of its own.
    for (i, example) in example_paths().iter().enumerate() {
        let text = std::fs::read_to_string(example).unwrap();
        for (j, doc) in text.split("\n---\n").enumerate() {
            if doc.contains("\nkind: CelldFleetPatch\n") {
                let p = dir.path().join(format!("patch-{i}-{j}.yaml"));
                std::fs::write(&p, doc).unwrap();
                rendered.push(p);
            }
        }
    }
    let again = render(&rendered);
    assert_eq!(again.files, bundle.files);
    assert!(
        load_paths(&[out]).is_ok_and(|f| f.is_empty()),
        "an output folder is not read back as input"
    );
}
