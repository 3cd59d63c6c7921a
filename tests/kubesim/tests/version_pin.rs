//! The Kubernetes version is pinned once, in tests/k8s-version.env; the k8s-openapi feature
//! in the workspace Cargo.toml and the kubelet version kubesim reports must name the same.

use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
}

fn pinned() -> String {
    let env = std::fs::read_to_string(root().join("tests/k8s-version.env")).unwrap();
    env.lines()
        .find_map(|l| l.strip_prefix("K8S_VERSION="))
        .expect("K8S_VERSION in tests/k8s-version.env")
        .trim()
        .to_string()
}

#[test]
fn k8s_openapi_feature_matches_the_pinned_minor() {
    let version = pinned();
    let minor = version
        .trim_start_matches('v')
        .split('.')
        .nth(1)
        .expect("vMAJOR.MINOR.PATCH");
    let cargo = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let line = cargo
        .lines()
        .find(|l| l.trim_start().starts_with("k8s-openapi"))
        .expect("k8s-openapi in [workspace.dependencies]");
    let feature = format!("\"v1_{minor}\"");
    assert!(
        line.contains(&feature),
        "k8s-openapi must enable {feature} to match K8S_VERSION={version}: {line}"
    );
}

#[test]
fn kubesim_reports_the_pinned_kubelet_version() {
    assert_eq!(kubesim::objects::KUBELET_VERSION, pinned());
}
