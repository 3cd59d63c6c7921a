//! The minijinja environment: every template in `templates/`, embedded in the binary, and
//! the two filters that put values into YAML (`q`, `yaml`).

use std::sync::LazyLock;

use minijinja::syntax::SyntaxConfig;
use minijinja::{AutoEscape, Environment, Error, ErrorKind, UndefinedBehavior, Value};

use super::yaml;

macro_rules! templates {
    ($($name:literal),* $(,)?) => {
        /// Every template, by name, with its source.
        pub const TEMPLATES: &[(&str, &str)] = &[
            $(($name, include_str!(concat!("../../../templates/", $name))),)*
        ];
    };
}

templates!(
    "celldbucketreservation.yaml.j2",
    "celldfleet.yaml.j2",
    "networkpolicy.yaml.j2",
    "poddisruptionbudget.yaml.j2",
    "service.yaml.j2",
    "service-peers.yaml.j2",
    "podtemplate.yaml.j2",
    "deployment.yaml.j2",
    "statefulset.yaml.j2",
    "networkpolicy-routing.yaml.j2",
    "httproute.yaml.j2",
    "ingress.yaml.j2",
    "kustomization.yaml.j2",
    "fleetfile.yaml.j2",
);

/// A set of parsed templates with our syntax and filters.
pub type Templates = Environment<'static>;

/// The shared environment (built once; templates are parsed once).
pub static ENV: LazyLock<Environment<'static>> = LazyLock::new(|| {
    environment(TEMPLATES).unwrap_or_else(|e| panic!("a template does not parse: {e:#}"))
});

/// An environment with these templates (name, source) and our syntax and filters. With
/// [`TEMPLATES`] it is [`ENV`]; with some sources changed it renders what another version
/// of celld-gen would (the GitOps upgrade tests render with it).
pub fn environment(templates: &[(&'static str, &'static str)]) -> Result<Templates, Error> {
    let mut env = Environment::new();
    env.set_syntax(
        SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(true)
            .build()
            .expect("default delimiters are valid"),
    );
    // A misspelt variable is an error, not an empty string.
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    // Escaping is explicit (`q`), never implied by a file extension.
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.add_filter("q", q);
    env.add_filter("yaml", yaml_block);
    for (name, source) in templates {
        env.add_template(name, source)?;
    }
    Ok(env)
}

/// `{{ value|q }}`: a string as a double-quoted YAML (and JSON) string. Only strings are
/// accepted: a number or `none` here is a mistake in the template or its context.
fn q(value: &Value) -> Result<String, Error> {
    match value.as_str() {
        Some(s) => Ok(yaml::quote(s)),
        None => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("q expects a string, got {} ({value:?})", value.kind()),
        )),
    }
}

/// `{{ value|yaml(indent) }}`: a map or list as block YAML, every line indented by
/// `indent` spaces, no trailing newline.
fn yaml_block(value: &Value, indent: usize) -> Result<String, Error> {
    let v = serde_json::to_value(value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    Ok(yaml::block(&v, indent))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_parses() {
        for (name, _) in TEMPLATES {
            ENV.get_template(name).unwrap();
        }
    }

    #[test]
    fn q_refuses_non_strings() {
        let e = ENV.render_str("{{ 1|q }}", ()).unwrap_err();
        assert!(e.to_string().contains("q expects a string"), "{e}");
    }

    #[test]
    fn undefined_variables_are_errors() {
        assert!(ENV.render_str("{{ nope }}", ()).is_err());
    }
}
