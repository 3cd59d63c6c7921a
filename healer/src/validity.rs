//! The live spec, checked by exactly the validation `celld-gen check` runs, so the
//! healer reports the same messages and never acts on a fleet the generator would refuse
//! (the CRD schema cannot express every rule, and a fleet may predate a rule).

use celld_gen::api::CelldFleet;
use celld_gen::api::labels::API_VERSION;
use serde_json::json;

/// One line per problem (`field: what is wrong (expected ...)`); empty when valid.
pub fn problems(f: &CelldFleet) -> Vec<String> {
    // Only what a fleet file holds: server-set metadata (uid, managedFields...) and the
    // status are not the user's to write, and annotations are not validated.
    let doc = json!({
        "apiVersion": API_VERSION,
        "kind": "CelldFleet",
        "metadata": {
            "name": f.metadata.name,
            "namespace": f.metadata.namespace,
        },
        "spec": f.spec,
    });
    // JSON is YAML; the generator's reader keeps positions we do not need here.
    let text = doc.to_string();
    match celld_gen::load::load_str(std::path::Path::new("live"), &text) {
        Ok(_) => Vec::new(),
        Err(diags) => diags
            .into_iter()
            .map(|d| {
                let mut line = String::new();
                if !d.field.is_empty() {
                    line.push_str(&d.field);
                    line.push_str(": ");
                }
                line.push_str(&d.message);
                if !d.expected.is_empty() {
                    line.push_str(&format!(" (expected {})", d.expected));
                }
                line
            })
            .collect(),
    }
}
