//! `celld-gen install`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{FAILED, OK};
use crate::install::{self, InstallOptions};
use crate::output;
use crate::render::OutputFile;
use celld_api::healer_flags::{self as flags, parse_duration};

const EXAMPLES: &str = "\
Examples:
  celld-gen install -o deploy/cluster/
  celld-gen install --image ghcr.io/celld-fleet/celld-healer@sha256:<64 hex> -o deploy/cluster/
  celld-gen install --watch-namespace apps --stdout | kubectl apply --server-side -f -
  celld-gen install --watch-namespace team-a,team-b -o deploy/cluster/   # a Role per namespace
  celld-gen install --shards 3 -o deploy/cluster/        # three healers, a third of the fleets each
  celld-gen install --team payments,search --repo-url https://git.example/fleets.git \\
      --repo-path deploy -o deploy/cluster/     # an Argo CD project and app, a Flux Kustomization each
  celld-gen install --namespace ops -o deploy/cluster/   # then: render --healer-namespace ops
  export CELLD_GEN_HEALER_NAMESPACE=ops                  # or set it once for both
  celld-gen install --options-from deploy/cluster/celld-gen-install.yaml -o deploy/cluster/
                                                # again, with the options the bundle recorded

Output layout (-o DIR):
  DIR/kustomization.yaml                  the cluster objects below, sorted
  DIR/celld-gen-install.yaml              the options the bundle was made with (not applied)
  DIR/argocd/teams/<NS>/, flux/teams/<NS>.yaml
                                          with --team: a team's AppProject and Application,
                                          and its Flux Kustomization
  DIR/crds/                               CelldFleet and CelldBucketReservation CRDs
  DIR/admission/                          ValidatingAdmissionPolicies (and bindings):
                                          no CelldFleet is deleted while its
                                          spec.deletionProtection is not false, and no
                                          fleet disk (claim) is deleted but by the healer
                                          or with fleet.celld.dev/deletion-allowed: \"true\"
  DIR/healer/                             namespace, ServiceAccount, RBAC, Deployment,
                                          metrics Service, PodDisruptionBudget, NetworkPolicy
  DIR/healer/deployment-<I>.yaml          with --shards: one Deployment (and PDB) per shard
  DIR/healer/served/<NS>/                 with --watch-namespace: the Role and RoleBinding
                                          in each served namespace
  DIR/argocd/application.yaml             an Application to adapt: server-side apply,
                                          ignore rules for healer-owned fields
  DIR/argocd/argocd-cm-health.yaml        the CelldFleet health check for argocd-cm
  DIR/argocd/celldfleet-health.lua        the same check as a file
  DIR/argocd/cmp/plugin.yaml              a config-management plugin running
                                          celld-gen render --stdout (ConfigManagementPlugin)
  DIR/argocd/cmp/configmap.yaml           the same, as a ConfigMap for the sidecar
  DIR/argocd/cmp/repo-server-patch.yaml   the sidecar: a strategic-merge patch of
                                          argocd-repo-server (image: --cmp-image)
  DIR/flux/kustomization.yaml             a Flux Kustomization to adapt, with ignore rules";

#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct InstallArgs {
    /// Output directory (replaced as a whole; must be missing, empty or an earlier install).
    #[arg(
        short = 'o',
        long = "output",
        value_name = "DIR",
        required_unless_present = "stdout",
        conflicts_with = "stdout"
    )]
    pub output: Option<PathBuf>,
    /// Write the cluster objects (CRDs, admission policies and healer) as one `---` stream
    /// instead; the Argo CD
    /// and Flux examples are left out.
    #[arg(long)]
    pub stdout: bool,
    /// Namespace the healer runs in. The fleet NetworkPolicies admit the healer from
    /// this namespace only, so give `render`, `check` and `diff` the same value with
    /// `--healer-namespace`, or set CELLD_GEN_HEALER_NAMESPACE once for all of them (a
    /// flag that disagrees with it is an error). [default: celld-system]
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Healer image, pinned by digest: `registry/repo@sha256:<64 hex>` (a tag beside the
    /// digest is fine). A tag alone is refused unless --allow-tag. [default: the release
    /// tag of this celld-gen]
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Accept an --image without a digest (a tag can move: each healer replica would run
    /// whatever it points to when it starts). For trying things out only.
    #[arg(long)]
    pub allow_tag: bool,
    /// Healer replicas (of each shard): one leads, the others wait with warm caches.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub replicas: i32,
    /// Split the fleets between N healers (at most 64): one Deployment per shard,
    /// `celld-healer-<i>` running `--shard=i/N`, each with its own Lease. A fleet belongs
    /// to the shard its identity hashes to. Changing N is safe at any time: healers of the
    /// new count wait until every healer of the old one has stopped (see docs/install.md).
    #[arg(long, value_name = "N", default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(flags::MAX_SHARDS)))]
    pub shards: u32,
    /// Serve only these namespaces (comma-separated or repeated; default: every
    /// namespace). Each gets a Role and RoleBinding with the healer's namespaced
    /// permissions; the ClusterRole then keeps only cluster-wide reads (every CelldFleet,
    /// for the identity check, and the bucket reservations).
    #[arg(long, value_name = "NS[,NS...]", value_delimiter = ',')]
    pub watch_namespace: Vec<String>,
    /// How long a single down member may stay down before it gets a fresh disk (at least
    /// 1m; the healer's own flag and grammar: 90s, 10m, 1h, 1m30s).
    #[arg(
        long = flags::MEMBER_REPLACEMENT_DELAY.name,
        value_name = "DURATION",
        default_value = flags::MEMBER_REPLACEMENT_DELAY.default,
        value_parser = parse_duration
    )]
    pub member_replacement_delay: Duration,
    /// Git repository written into the Argo CD and Flux examples.
    #[arg(long, value_name = "URL")]
    pub repo_url: Option<String>,
    /// Path of the rendered fleets in that repository.
    #[arg(long, value_name = "PATH")]
    pub repo_path: Option<String>,
    /// Image of the Argo CD plugin sidecar (argocd/cmp/): it must hold `celld-gen` and
    /// `sh` on its PATH.
    #[arg(long, value_name = "IMAGE")]
    pub cmp_image: Option<String>,
    /// Namespaces that are teams of their own (comma-separated or repeated): each gets an
    /// Argo CD AppProject (its namespace only, the kinds a fleet renders) and
    /// Application, and a Flux Kustomization in its namespace applying as its
    /// ServiceAccount, each syncing only `<repo-path>/<namespace>`.
    #[arg(long, value_name = "NS[,NS...]", value_delimiter = ',')]
    pub team: Vec<String>,
    /// Who may read the healer's /metrics: `none` (anyone who reaches the port; the
    /// NetworkPolicy admits it) or `kubernetes` (HTTPS, and only a bearer token whose
    /// user may `get` the nonResourceURL /metrics: bind the ClusterRole
    /// `celld-healer-metrics-reader-<namespace>` to your Prometheus). The probes stay
    /// open either way.
    #[arg(long, value_name = "MODE", default_value = flags::MetricsAuth::None.as_str(),
        value_parser = parse_metrics_auth)]
    pub metrics_auth: flags::MetricsAuth,
    /// Also render a Prometheus Operator ServiceMonitor for the healer's metrics Service
    /// (healer/servicemonitor.yaml; it needs the monitoring.coreos.com CRDs). With
    /// --metrics-auth kubernetes it scrapes over HTTPS with Prometheus's own token.
    #[arg(long)]
    pub service_monitor: bool,
    /// Kubernetes minor of the cluster (1.34 to 1.37): only APIs it serves are
    /// rendered. Before 1.36, which has no MutatingAdmissionPolicy, new fleet
    /// StatefulSets start at zero from Git (`render --kubernetes-version` the same minor)
    /// and a ValidatingAdmissionPolicy keeps `spec.replicas` the healer's. Also read from
    /// CELLD_GEN_KUBERNETES_VERSION, which `render`, `check` and `diff` read too. After a
    /// cluster upgrade, install and render again with the new minor.
    /// [default: the newest supported, 1.37]
    #[arg(long, value_name = "MINOR")]
    pub kubernetes_version: Option<String>,
    /// Render with the options recorded in FILE, the `celld-gen-install.yaml` every
    /// bundle holds (after an upgrade of celld-gen: the same bundle, from the new
    /// release). The options themselves are then not given as flags, but for
    /// --kubernetes-version (or CELLD_GEN_KUBERNETES_VERSION), which names the cluster's
    /// new minor after a cluster upgrade.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = [
            "namespace", "image", "allow_tag", "replicas", "shards", "watch_namespace",
            "member_replacement_delay", "repo_url", "repo_path", "cmp_image", "team",
            "metrics_auth", "service_monitor",
        ]
    )]
    pub options_from: Option<PathBuf>,
}

/// The flags a record stands for: the recorded options go through the same checks as
/// flags do (a tag without a digest passes only if --allow-tag was recorded with it).
fn recorded(args: &InstallArgs, path: &std::path::Path) -> Result<InstallArgs, Vec<String>> {
    let fail = |e: String| vec![format!("{}: {e}", path.display())];
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let r = install::record::Record::parse(&text).map_err(fail)?;
    let delay = r.delay().map_err(fail)?;
    Ok(InstallArgs {
        output: args.output.clone(),
        stdout: args.stdout,
        namespace: Some(r.namespace),
        allow_tag: r.allow_tag,
        image: r.image,
        replicas: r.replicas,
        shards: r.shards,
        watch_namespace: r.watch_namespace,
        member_replacement_delay: delay,
        repo_url: Some(r.repo_url),
        repo_path: Some(r.repo_path),
        cmp_image: r.cmp_image,
        team: r.team,
        metrics_auth: flags::MetricsAuth::parse(&r.metrics_auth).map_err(fail)?,
        service_monitor: r.service_monitor,
        // The cluster's minor is what changes under a bundle (a cluster upgrade): a flag,
        // or the variable, names the new one; else the recorded one.
        kubernetes_version: args.kubernetes_version.clone().or_else(|| {
            let env = std::env::var(crate::kubernetes::KUBERNETES_VERSION_ENV).unwrap_or_default();
            env.trim().is_empty().then_some(r.kubernetes_version)
        }),
        options_from: None,
    })
}

/// The options, or every problem with the flags.
fn options(args: &InstallArgs) -> Result<InstallOptions, Vec<String>> {
    let mut problems = Vec::new();
    let defaults = InstallOptions::default();
    let namespace = super::healer_namespace(
        "--namespace",
        args.namespace.as_deref(),
        std::env::var(super::HEALER_NAMESPACE_ENV).ok().as_deref(),
    )
    .unwrap_or_else(|e| {
        problems.push(e.to_string());
        defaults.namespace.clone()
    });
    let kubernetes =
        super::kubernetes_version(args.kubernetes_version.as_deref()).unwrap_or_else(|e| {
            problems.push(e.to_string());
            defaults.kubernetes
        });
    // The healer's rule and words for the namespaces it serves.
    for ns in &args.watch_namespace {
        if let Err(e) = flags::check_namespace("watch-namespace", ns) {
            problems.push(e.to_string());
        }
    }
    for ns in &args.team {
        if let Err(e) = flags::check_namespace("team", ns) {
            problems.push(e.to_string());
        }
    }
    if !(1..=10).contains(&args.replicas) {
        problems.push(format!("--replicas {} is outside 1..10", args.replicas));
    }
    // The healer's own bound and message: a value it would refuse never reaches it.
    if let Err(e) = flags::MEMBER_REPLACEMENT_DELAY.check(args.member_replacement_delay) {
        problems.push(e.to_string());
    }
    for (flag, image) in [("--image", &args.image), ("--cmp-image", &args.cmp_image)] {
        if image
            .as_deref()
            .is_some_and(|i| i.is_empty() || i.contains(char::is_whitespace))
        {
            problems.push(format!("{flag} is not an image reference"));
        }
    }
    if let Some(image) = args.image.as_deref().filter(|i| !i.is_empty()) {
        let pinned = image.contains("@sha256:");
        match crate::api::validate::formats::image_problem(image) {
            _ if !pinned && args.allow_tag => {}
            None => {}
            Some(_) if !pinned => problems.push(format!(
                "--image {image} is not pinned by digest: a tag can move, and each healer replica would run whatever it points to when it starts; pin it (registry/repo@sha256:<64 hex>, a tag beside the digest is fine), or pass --allow-tag to try things out"
            )),
            Some(p) => problems.push(format!("--image {image}: {p}")),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(InstallOptions {
        namespace,
        // The digest alone is what runs; a tag beside it is for people.
        image: args
            .image
            .as_deref()
            .map(crate::api::validate::formats::pinned_image)
            .unwrap_or(defaults.image),
        replicas: args.replicas,
        shards: args.shards,
        watch_namespaces: {
            let mut v: Vec<String> = args
                .watch_namespace
                .iter()
                .map(|ns| ns.trim().to_string())
                .collect();
            v.sort();
            v.dedup();
            v
        },
        member_replacement_delay: args.member_replacement_delay,
        repo_url: args.repo_url.clone().unwrap_or(defaults.repo_url),
        repo_path: args.repo_path.clone().unwrap_or(defaults.repo_path),
        cmp_image: args.cmp_image.clone().unwrap_or(defaults.cmp_image),
        teams: {
            let mut v: Vec<String> = args.team.iter().map(|ns| ns.trim().to_string()).collect();
            v.sort();
            v.dedup();
            v
        },
        metrics_auth: args.metrics_auth,
        service_monitor: args.service_monitor,
        kubernetes,
    })
}

fn parse_metrics_auth(value: &str) -> Result<flags::MetricsAuth, String> {
    flags::MetricsAuth::parse(value)
}

/// Prints the problems that stop an install; nothing is written.
fn refuse(problems: Vec<String>) -> u8 {
    let mut err = anstream::stderr().lock();
    for p in problems {
        let _ = writeln!(err, "error: {p}");
    }
    let _ = writeln!(err, "nothing was written");
    FAILED
}

pub fn run(args: InstallArgs) -> u8 {
    let args = match &args.options_from {
        None => args,
        Some(path) => match recorded(&args, path) {
            Ok(a) => a,
            Err(problems) => return refuse(problems),
        },
    };
    let opts = match options(&args) {
        Ok(o) => o,
        Err(problems) => return refuse(problems),
    };
    let files = install::render(&opts);
    match &args.output {
        None => {
            // Cluster objects only, in apply order (CRDs first).
            let mut stream = String::new();
            for (_, obj) in install::objects(&opts) {
                stream.push_str("---\n");
                stream.push_str(&crate::render::yaml::block(&obj, 0));
                stream.push('\n');
            }
            if let Err(e) = super::print(stream.as_bytes()) {
                let _ = writeln!(anstream::stderr(), "error: writing to standard output: {e}");
                return FAILED;
            }
        }
        Some(dir) => {
            let files: Vec<OutputFile> = files
                .into_iter()
                .map(|f| OutputFile {
                    path: f.path,
                    contents: f.text,
                })
                .collect();
            match output::write_files_tree(dir, &files, install::HEADER) {
                Ok(outcome) => {
                    let what = match outcome {
                        output::WriteOutcome::Replaced => "written",
                        output::WriteOutcome::Unchanged => "already up to date",
                    };
                    let _ = writeln!(
                        anstream::stderr(),
                        "install bundle for namespace {} {what}: {} files in {}",
                        opts.namespace,
                        files.len(),
                        dir.display()
                    );
                }
                Err(e) => {
                    let _ = writeln!(anstream::stderr(), "error: {e}; nothing was written");
                    return FAILED;
                }
            }
        }
    }
    OK
}
