//! `celld-gen init`.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use rand::Rng;

use super::{FAILED, OK};
use crate::api::labels;
use crate::render::templates::ENV;

const EXAMPLES: &str = "\
Examples:
  celld-gen init orders --namespace shop --profile Bucket --bucket shop-orders \\
      --region us-east-1 --zones a,b,c \\
      --image ghcr.io/ewhauser/celld@sha256:<64 hex> > fleets/orders.yaml
  celld-gen init ledger --namespace ledger --profile PersistentFleet --bucket ledger-cells \\
      --region eu-west-1 --zones eu-west-1a,eu-west-1b,eu-west-1c --storage-class gp3 \\
      --size-gib 50 --service-account ledger \\
      --image ghcr.io/ewhauser/celld@sha256:<64 hex> > fleets/ledger.yaml
  celld-gen init orders -n shop --profile Bucket --bucket shop-orders --region us-east-1 \\
      --zones a,b,c --image ghcr.io/ewhauser/celld@sha256:<64 hex> -o fleets/orders.yaml
  # GKE, bucket on Google Cloud Storage (S3 interoperability, HMAC key in a Secret):
  celld-gen init maps --namespace geo --profile Bucket --bucket geo-maps \\
      --region us-central1 --zones a,b,c --endpoint https://storage.googleapis.com \\
      --credentials-secret gcs-hmac --image ghcr.io/ewhauser/celld@sha256:<64 hex>
  # A fleet like another: its settings, a new name, identity and bucket (or prefix).
  celld-gen init ledger-v2 --from fleets/ledger.yaml --bucket ledger-v2-cells \\
      -o fleets/ledger-v2.yaml
  # On premises, MinIO: zones are any node label value, not checked against the region.
  celld-gen init lab --namespace lab --profile Bucket --bucket lab-cells \\
      --region us-east-1 --zones rack-1,rack-2,rack-3 --zone-format Any \\
      --endpoint http://minio.store:9000 --credentials-secret minio \\
      --image ghcr.io/ewhauser/celld@sha256:<64 hex>

The file starts with a yaml-language-server modeline pointing at the fleet schema, so
editors complete and check fields: by default `./celldfleet.schema.json`, the file that
`celld-gen schema > fleets/celldfleet.schema.json` writes next to the fleet files; change
it with --schema (a relative path or an https:// URL). With -o FILE, nothing is written
unless the fleet is valid, and an existing FILE is never overwritten (its identity would
be lost).";

fn zones_long_help() -> String {
    format!(
        "Zones, comma-separated, as the topology.kubernetes.io/zone node label names them. \
         Full names (us-east-1a, us-central1-a, eastus-1), or the short form appended to \
         the region: a letter for AWS (a -> us-east-1a) and Google Cloud (a -> \
         us-central1-a), a number for Azure (1 -> eastus-1).\n\n{}",
        celld_api::validate::formats::ZONE_FORMATS
    )
}

#[derive(Args, Debug, Clone)]
#[command(after_help = EXAMPLES)]
pub struct InitArgs {
    /// Fleet name: a DNS label of at most 40 characters.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Make a fleet like the one in FILE: every setting kept but the name, a fresh
    /// identity, and a bucket or prefix of its own (--bucket, --prefix, or a prefix named
    /// after the new fleet when FILE's fleet has one); --namespace may change too.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = [
            "profile", "region", "zones", "zone_format", "endpoint", "credentials_secret",
            "image", "storage_class", "size_gib", "bucket_workload", "members",
            "service_account", "placement",
        ]
    )]
    pub from: Option<PathBuf>,
    /// Namespace of the fleet (with --from: default, the same as FILE's).
    #[arg(long, short = 'n', required_unless_present = "from")]
    pub namespace: Option<String>,
    /// `Bucket` (members keep nothing locally) or `PersistentFleet` (each member owns a
    /// disk).
    #[arg(long, value_enum, ignore_case = true, required_unless_present = "from")]
    pub profile: Option<ProfileArg>,
    /// The bucket the fleet uses (reserved to this fleet for ever).
    #[arg(long, required_unless_present = "from")]
    pub bucket: Option<String>,
    /// The bucket's region: AWS (`us-east-1`); with --endpoint also Google Cloud
    /// (`us-central1`) or Azure (`eastus`).
    #[arg(long, required_unless_present = "from")]
    pub region: Option<String>,
    /// Zones, comma-separated: full names (`us-east-1a`, `us-central1-a`, `eastus-1`) or
    /// the short form appended to the region (`a,b,c`; `1,2,3` for Azure).
    #[arg(
        long,
        value_delimiter = ',',
        required_unless_present = "from",
        num_args = 1..,
        long_help = zones_long_help()
    )]
    pub zones: Vec<String>,
    /// `Cloud` (zones of --region, checked) or `Any` (any label value, e.g. on premises)
    /// [default: Cloud].
    #[arg(long, value_enum, ignore_case = true)]
    pub zone_format: Option<ZoneFormatArg>,
    /// An S3-compatible endpoint for the bucket (GCS, MinIO...), e.g.
    /// `https://storage.googleapis.com`; needs --credentials-secret.
    #[arg(long, value_name = "URL", requires = "credentials_secret")]
    pub endpoint: Option<String>,
    /// Secret with keys `accessKeyId` and `secretAccessKey` for --endpoint.
    #[arg(long, value_name = "NAME", requires = "endpoint")]
    pub credentials_secret: Option<String>,
    /// The celld image, pinned by digest: `registry/repo@sha256:<64 hex>`.
    #[arg(long, required_unless_present = "from")]
    pub image: Option<String>,
    /// StorageClass of member disks (required for PersistentFleet, refused for Bucket).
    #[arg(long, required_if_eq("profile", "PersistentFleet"))]
    pub storage_class: Option<String>,
    /// Disk (PersistentFleet) or scratch (Bucket) size in GiB [default: 10].
    #[arg(long)]
    pub size_gib: Option<i32>,
    /// Bucket only: `Deployment` or `Ordered` (a StatefulSet) [default: Deployment].
    #[arg(long, value_enum, ignore_case = true)]
    pub bucket_workload: Option<WorkloadArg>,
    /// Number of members [default: 3, or the number of zones if larger].
    #[arg(long)]
    pub members: Option<i32>,
    /// ServiceAccount the members run as (no token is mounted) [default: default].
    #[arg(long)]
    pub service_account: Option<String>,
    /// Key prefix inside the bucket.
    #[arg(long)]
    pub prefix: Option<String>,
    /// `Strict` (one member per node, even zone spread required) or `Relaxed`
    /// (preferred) [default: Strict].
    #[arg(long, value_enum, ignore_case = true)]
    pub placement: Option<PlacementArg>,
    /// Write the fleet file to FILE instead of standard output; an existing FILE is
    /// refused, never overwritten.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Schema reference for the yaml-language-server modeline at the top of the file.
    #[arg(long, value_name = "PATH|URL", default_value = DEFAULT_SCHEMA_REF)]
    pub schema: String,
}

/// Where the modeline points by default: the schema file next to the fleet files.
pub const DEFAULT_SCHEMA_REF: &str = "./celldfleet.schema.json";

/// Why `init -o FILE` wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum InitWriteError {
    /// The file is there already.
    #[error(
        "{0} already exists; init never overwrites a fleet file (its identity would be lost). Choose another path, or remove the file first"
    )]
    Exists(PathBuf),
    /// Creating or writing failed.
    #[error("writing {path}: {source}")]
    Io {
        /// Where.
        path: PathBuf,
        /// What.
        source: std::io::Error,
    },
}

/// Writes `text` to a new file at `path`; an existing file is refused (atomically:
/// `create_new`), and a half-written file is removed.
pub fn write_new(path: &Path, text: &str) -> Result<(), InitWriteError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::AlreadyExists => InitWriteError::Exists(path.to_path_buf()),
            _ => InitWriteError::Io {
                path: path.to_path_buf(),
                source,
            },
        })?;
    f.write_all(text.as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(|source| {
            let _ = std::fs::remove_file(path);
            InitWriteError::Io {
                path: path.to_path_buf(),
                source,
            }
        })
}

/// `--profile`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfileArg {
    /// Members keep nothing locally: every write waits for the bucket.
    #[value(name = "Bucket")]
    Bucket,
    /// Each member owns a disk: writes are acknowledged by the fleet.
    #[value(name = "PersistentFleet")]
    PersistentFleet,
}

/// `--bucket-workload`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadArg {
    /// A Deployment.
    #[value(name = "Deployment")]
    Deployment,
    /// A StatefulSet: stable member names, one change at a time.
    #[value(name = "Ordered")]
    Ordered,
}

/// `--zone-format`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneFormatArg {
    /// Zones of the region as AWS, Google Cloud or Azure name them.
    #[value(name = "Cloud")]
    Cloud,
    /// Any label value; not checked against the region.
    #[value(name = "Any")]
    Any,
}

/// `--placement`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlacementArg {
    /// One member per node and an even zone spread, required.
    #[value(name = "Strict")]
    Strict,
    /// The same, preferred.
    #[value(name = "Relaxed")]
    Relaxed,
}

const IDENTITY_ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
/// Length of a fleet identity.
pub const IDENTITY_LEN: usize = 26;

/// A fresh fleet identity: 26 characters of `[a-z0-9]` from the thread-local CSPRNG
/// (about 134 bits).
pub fn new_identity() -> String {
    let mut rng = rand::rng();
    (0..IDENTITY_LEN)
        .map(|_| IDENTITY_ALPHABET[rng.random_range(0..IDENTITY_ALPHABET.len())] as char)
        .collect()
}

/// The fleet file for `args` with the given identity (not validated), starting with the
/// yaml-language-server modeline.
pub fn fleet_file(args: &InitArgs, identity: &str) -> Result<String, minijinja::Error> {
    let body = fleet_body(args, identity)?;
    Ok(format!(
        "# yaml-language-server: $schema={}\n{body}",
        args.schema
    ))
}

fn fleet_body(args: &InitArgs, identity: &str) -> Result<String, minijinja::Error> {
    let zones: Vec<String> = args
        .zones
        .iter()
        .map(|z| z.trim())
        .filter(|z| !z.is_empty())
        .map(|z| match args.zone_format {
            // Free-form zones are taken as written: `a` may be a real zone name there.
            Some(ZoneFormatArg::Any) => z.to_owned(),
            _ => celld_api::validate::formats::expand_zone(z, args.region.as_deref().unwrap_or("")),
        })
        .collect();
    let members = args
        .members
        .unwrap_or_else(|| (zones.len() as i32).max(crate::api::defaults::MEMBERS));
    let ctx = minijinja::context! {
        fleet_api_version => labels::API_VERSION,
        name => &args.name,
        namespace => args.namespace.as_deref().unwrap_or(""),
        identity => identity,
        profile => match args.profile {
            Some(ProfileArg::Bucket) => "Bucket",
            Some(ProfileArg::PersistentFleet) | None => "PersistentFleet",
        },
        bucket_workload => args.bucket_workload.map(|w| match w {
            WorkloadArg::Deployment => "Deployment",
            WorkloadArg::Ordered => "Ordered",
        }),
        image => args.image.as_deref().unwrap_or(""),
        members => members,
        service_account => args.service_account.as_deref().unwrap_or("default"),
        bucket => args.bucket.as_deref().unwrap_or(""),
        region => args.region.as_deref().unwrap_or(""),
        prefix => &args.prefix,
        endpoint => &args.endpoint,
        credentials_secret => &args.credentials_secret,
        zone_format => args.zone_format.map(|f| match f {
            ZoneFormatArg::Cloud => "Cloud",
            ZoneFormatArg::Any => "Any",
        }),
        storage_class => &args.storage_class,
        size_gib => args.size_gib,
        zones => zones,
        mode => args.placement.map(|p| match p {
            PlacementArg::Strict => "Strict",
            PlacementArg::Relaxed => "Relaxed",
        }),
    };
    ENV.get_template("fleetfile.yaml.j2")?.render(ctx)
}

pub fn run(args: InitArgs) -> u8 {
    let made = match &args.from {
        Some(from) => super::init_from::fleet_file_from(&args, from, &new_identity())
            .map_err(|e| e.to_string()),
        None => fleet_file(&args, &new_identity()).map_err(|e| format!("{e:#}")),
    };
    let text = match made {
        Ok(t) => t,
        Err(e) => {
            let _ = writeln!(anstream::stderr(), "error: {e}; nothing was printed");
            return FAILED;
        }
    };
    let source = format!("<init {}>", args.name);
    if let Err(diags) = crate::load::load_str(Path::new(&source), &text) {
        let mut err = anstream::stderr().lock();
        let _ = writeln!(
            err,
            "error: these options do not make a valid fleet; nothing was printed:"
        );
        for d in diags {
            let field = if d.field.is_empty() {
                String::new()
            } else {
                format!("{}: ", d.field)
            };
            let expected = if d.expected.is_empty() {
                String::new()
            } else {
                format!(" (expected {})", d.expected)
            };
            let _ = writeln!(err, "  {field}{}{expected}", d.message);
        }
        return FAILED;
    }
    if let Some(path) = &args.output {
        return match write_new(path, &text) {
            Ok(()) => {
                let _ = writeln!(
                    anstream::stderr(),
                    "wrote {}; check it with `celld-gen check {}`",
                    path.display(),
                    path.display()
                );
                OK
            }
            Err(e) => {
                let _ = writeln!(anstream::stderr(), "error: {e}");
                FAILED
            }
        };
    }
    // A closed pipe is a reader that has what it wanted, not a failure.
    match super::print(text.as_bytes()) {
        Ok(_) => OK,
        Err(_) => FAILED,
    }
}
