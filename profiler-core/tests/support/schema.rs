//! The JSON reports checked against their schemas in docs/: shared by profiler-core's golden
//! test and the profiler's end-to-end tests (`#[path]`-included there), so the check is one.

/// `json`'s departures from the schema `docs/<schema>` (`report.schema.json`,
/// `diff.schema.json`), one line each: empty when it conforms.
pub fn schema_errors(schema: &str, json: &serde_json::Value) -> Vec<String> {
    let path = format!("{}/../docs/{schema}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    let schema: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path} is not JSON: {e}"));
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    validator
        .iter_errors(json)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect()
}
