//! The Argo CD config-management plugin that `celld-gen install` renders (`argocd/cmp/`),
//! run by Argo CD's own code (`celld-argocd cmp`, module `github.com/argoproj/argo-cd/v3`;
//! see `celld_e2e::gitops`); no cluster needed.
//!
//! - the `plugin.yaml` of the rendered ConfigMap, read by the CMP server's own reader;
//!   Argo CD's CMP server serves it on its socket, and the repo server's manifest
//!   generation for an Application naming the plugin sends it the app's folder of a
//!   repository of fleet files. The CMP server runs `generate` (`sh -c`, in the app's
//!   folder, with the `ARGOCD_APP_*` variables, stdout only) and Argo CD's YAML splitter
//!   reads the output back: the objects equal those `celld-gen render -o` writes for the
//!   same fleet files;
//! - the sidecar patch, merged onto the `argocd-repo-server` Deployment Argo CD ships,
//!   reads as a Deployment and mounts only volumes that exist there.

use std::collections::BTreeMap;
use std::process::Command;

use anyhow::{Context, Result, ensure};
use celld_e2e::gitops::{self, Bundle};
use kubesim::testing::{repo_root, unique_name, workspace_bin};
use serde_json::{Value, json};

/// A scratch folder removed on drop.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The objects by `Kind namespace/name`; a name seen twice is an error.
fn by_id(objs: Vec<Value>, what: &str) -> Result<BTreeMap<String, Value>> {
    let mut out = BTreeMap::new();
    for o in objs {
        let id = gitops::id(&o);
        ensure!(out.insert(id.clone(), o).is_none(), "{what}: {id} twice");
    }
    Ok(out)
}

#[test]
fn argocd_plugin_generates_what_render_writes() -> Result<()> {
    let Some(argo) = gitops::engine("celld-argocd", "argocd_plugin_generates_what_render_writes")?
    else {
        return Ok(());
    };
    let bundle = Bundle::render()?;
    let cm = bundle.file("argocd/cmp/configmap.yaml")?;
    let plugin_yaml = cm["data"]["plugin.yaml"]
        .as_str()
        .context("no plugin.yaml in the ConfigMap")?;

    // A repository of fleet files: every example under fleets/, and a README beside them.
    let scratch = Scratch(std::env::temp_dir().join(unique_name("celld-cmp")));
    let repo = scratch.0.join("repo");
    let fleets = repo.join("fleets");
    std::fs::create_dir_all(&fleets)?;
    let mut n = 0;
    for e in std::fs::read_dir(repo_root().join("examples"))? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "yaml") {
            std::fs::copy(&p, fleets.join(p.file_name().context("file name")?))?;
            n += 1;
        }
    }
    ensure!(n > 0, "no examples");
    std::fs::write(fleets.join("README.md"), "# fleets\n")?;

    // The sidecar image has celld-gen on its PATH: here, the one just built.
    let celld_gen = workspace_bin("celld-gen", "CELLD_GEN_BIN")?;
    let mut path = celld_gen
        .parent()
        .context("celld-gen has no folder")?
        .as_os_str()
        .to_owned();
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    let revision = "0123456789abcdef0123456789abcdef01234567";
    let out = gitops::run_with_env(
        &argo,
        "cmp",
        &[("PATH", path)],
        &json!({
            "pluginYaml": plugin_yaml,
            "repoRoot": repo,
            "app": {
                "name": "celld-fleets", "namespace": "argocd", "project": "default",
                "repoURL": "https://git.example.com/platform/fleets.git",
                "path": "fleets", "targetRevision": "HEAD", "revision": revision,
            },
        }),
    )?;
    ensure!(
        out["plugin"] == "celld-gen" && out["sourceType"] == "Plugin",
        "Argo CD did not generate with the plugin: {}",
        out["plugin"]
    );
    let generated = by_id(
        serde_json::from_value(out["objects"].clone()).context("objects")?,
        "the plugin's output",
    )?;

    // The same fleet files rendered into a tree, as a user commits it.
    let tree = scratch.0.join("deploy");
    let r = Command::new(&celld_gen)
        .arg("render")
        .arg(&fleets)
        .arg("-o")
        .arg(&tree)
        .output()
        .context("running celld-gen render")?;
    ensure!(
        r.status.success(),
        "celld-gen render: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    let rendered = by_id(gitops::tree_objects(&tree)?, "render -o")?;
    ensure!(
        generated.keys().eq(rendered.keys()),
        "the plugin generated {:#?}, render -o wrote {:#?}",
        generated.keys().collect::<Vec<_>>(),
        rendered.keys().collect::<Vec<_>>()
    );
    for (id, o) in &rendered {
        ensure!(
            generated[id] == *o,
            "{id}: the plugin generated {}, render -o wrote {o}",
            generated[id]
        );
    }
    eprintln!(
        "[cmp] Argo CD's CMP server ran the plugin on {n} fleet files: {} objects, equal to render -o",
        generated.len()
    );
    Ok(())
}

#[test]
fn argocd_plugin_sidecar_patches_the_shipped_repo_server() -> Result<()> {
    let Some(argo) = gitops::engine(
        "celld-argocd",
        "argocd_plugin_sidecar_patches_the_shipped_repo_server",
    )?
    else {
        return Ok(());
    };
    let bundle = Bundle::render()?;
    let shipped = gitops::gitops_dir().join("argocd/argocd-repo-server-deployment.yaml");
    let base = gitops::yaml(
        &std::fs::read_to_string(&shipped).with_context(|| {
            format!("reading {} (run tests/gitops/build.sh)", shipped.display())
        })?,
        "argocd-repo-server-deployment.yaml",
    )?;
    let patch = bundle.file("argocd/cmp/repo-server-patch.yaml")?;
    ensure!(
        patch["metadata"]["name"] == base["metadata"]["name"],
        "the patch names {}, Argo CD ships {}",
        patch["metadata"]["name"],
        base["metadata"]["name"]
    );
    let merged = gitops::run(
        &argo,
        "merge",
        None,
        &json!({"base": base, "patches": [patch]}),
    )?;
    let pod = &merged["spec"]["template"]["spec"];
    let containers = pod["containers"].as_array().context("no containers")?;
    ensure!(
        containers.iter().any(|c| c["name"] == "argocd-repo-server"),
        "the repo server is gone: {containers:?}"
    );
    let sidecar = containers
        .iter()
        .find(|c| c["name"] == "celld-gen-cmp")
        .context("no sidecar after the merge")?;
    let volumes: BTreeMap<&str, &Value> = pod["volumes"]
        .as_array()
        .context("no volumes")?
        .iter()
        .filter_map(|v| Some((v["name"].as_str()?, v)))
        .collect();
    let mounts = sidecar["volumeMounts"].as_array().context("no mounts")?;
    for m in mounts {
        let name = m["name"].as_str().context("mount name")?;
        ensure!(
            volumes.contains_key(name),
            "the sidecar mounts {name}, which is no volume"
        );
    }
    let mount = |path: &str| -> Result<&str> {
        mounts
            .iter()
            .find(|m| m["mountPath"] == path)
            .and_then(|m| m["name"].as_str())
            .with_context(|| format!("nothing mounted at {path}"))
    };
    // The CMP server binary, copied there by Argo CD's own init container.
    let var_files = mount("/var/run/argocd")?;
    ensure!(
        pod["initContainers"]
            .as_array()
            .is_some_and(|i| i.iter().any(|c| c["volumeMounts"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["name"] == var_files)))),
        "no init container fills {var_files}"
    );
    ensure!(sidecar["command"] == json!(["/var/run/argocd/argocd-cmp-server"]));
    // The sockets, shared with the repo server.
    let plugins = mount("/home/argocd/cmp-server/plugins")?;
    ensure!(
        containers
            .iter()
            .filter(|c| c["name"] == "argocd-repo-server")
            .any(|c| c["volumeMounts"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["name"] == plugins))),
        "the repo server does not mount {plugins}"
    );
    // plugin.yaml, from the rendered ConfigMap.
    let config = mount("/home/argocd/cmp-server/config/plugin.yaml")?;
    let cm = bundle.file("argocd/cmp/configmap.yaml")?;
    ensure!(
        volumes[config]["configMap"]["name"] == cm["metadata"]["name"],
        "plugin.yaml comes from {}",
        volumes[config]
    );
    ensure!(
        sidecar["securityContext"]["runAsNonRoot"] == true
            && sidecar["securityContext"]["runAsUser"] == 999,
        "the sidecar runs as {}",
        sidecar["securityContext"]
    );
    eprintln!(
        "[cmp] the sidecar patch merges onto Argo CD's argocd-repo-server: {} containers",
        containers.len()
    );
    Ok(())
}
