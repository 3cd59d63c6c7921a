//! What `celld-gen version` reports: the crate version, the commit it was built from, and
//! the Kubernetes versions the rendered objects and the install bundle are made for.

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit (12 hex digits) captured by build.rs, or `unknown` when built without
/// git (e.g. from a source tarball without `CELLD_GEN_GIT_COMMIT`).
pub const GIT_COMMIT: &str = env!("CELLD_GEN_GIT_COMMIT");

/// The supported Kubernetes range as people write it (`1.34-1.37`): [`crate::kubernetes`].
pub fn kubernetes_range() -> String {
    crate::kubernetes::range()
}

/// The healer image a release installs by default, as the release pipeline pushed it
/// (`repo:tag@sha256:...`, what `scripts/build-image.sh` prints), captured when celld-gen
/// is built with `CELLD_GEN_HEALER_IMAGE` set. Unset (a developer's build): `None`.
pub const BUILT_HEALER_IMAGE: Option<&str> = option_env!("CELLD_GEN_HEALER_IMAGE");

/// The healer image `install` renders without `--image`: the one this release was built
/// with when it is pinned by digest (the digest alone, as `--image` renders it); else the
/// release's tag, which `version` reports as unpinned.
pub fn default_healer_image() -> String {
    default_healer_image_from(BUILT_HEALER_IMAGE)
}

fn default_healer_image_from(built: Option<&str>) -> String {
    match built.map(str::trim) {
        Some(image)
            if image.contains("@sha256:")
                && crate::api::validate::formats::image_problem(image).is_none() =>
        {
            crate::api::validate::formats::pinned_image(image)
        }
        _ => format!("ghcr.io/celld-fleet/celld-healer:v{VERSION}"),
    }
}

/// `celld-gen version`'s text, also what `--version` prints after the name.
pub fn long_version() -> String {
    let image = default_healer_image();
    let pinned = if image.contains("@sha256:") {
        ""
    } else {
        " (a tag: this build has no pinned release image; pass install --image)"
    };
    format!(
        "{VERSION}\ncommit: {GIT_COMMIT}\nkubernetes: {}\nhealer image: {image}{pinned}",
        kubernetes_range()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A release built with its pushed image installs that image by its digest; a build
    /// without one, or with an unpinned or malformed one, falls back to the release tag.
    #[test]
    fn the_default_healer_image_is_the_pinned_release_image() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let tag = format!("ghcr.io/celld-fleet/celld-healer:v{VERSION}");
        assert_eq!(
            default_healer_image_from(Some(&format!("registry.example/celld-healer:v1@{digest}"))),
            format!("registry.example/celld-healer@{digest}")
        );
        assert_eq!(default_healer_image_from(None), tag);
        assert_eq!(
            default_healer_image_from(Some("registry.example/celld-healer:v1")),
            tag
        );
        assert_eq!(
            default_healer_image_from(Some("not an image@sha256:x")),
            tag
        );
    }

    /// The supported range is the pinned control planes' (tests/k8s-version.env: the
    /// newest, which the k8s-openapi feature follows, and the oldest), so it is never
    /// written twice.
    #[test]
    fn newest_supported_is_the_pinned_version() {
        let env = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/k8s-version.env");
        let Ok(text) = std::fs::read_to_string(&env) else {
            // Built outside the workspace (a packaged crate): nothing to compare with.
            return;
        };
        let pinned = text
            .lines()
            .find_map(|l| l.strip_prefix("K8S_VERSION=v"))
            .expect("K8S_VERSION in tests/k8s-version.env");
        let mut parts = pinned
            .split('.')
            .map(|p| p.parse::<u32>().expect("a number"));
        let (major, minor) = (parts.next(), parts.next());
        assert_eq!(
            (major, minor),
            (Some(1), Some(crate::kubernetes::NEWEST.minor()))
        );
        let oldest = text
            .lines()
            .find_map(|l| l.strip_prefix("K8S_OLDEST_VERSION=v"))
            .expect("K8S_OLDEST_VERSION in tests/k8s-version.env");
        assert_eq!(
            oldest.split('.').nth(1).and_then(|m| m.parse::<u32>().ok()),
            Some(crate::kubernetes::OLDEST.minor())
        );
    }

    #[test]
    fn range_text() {
        assert_eq!(kubernetes_range(), "1.34-1.37");
        assert!(long_version().contains("\ncommit: "));
    }
}
