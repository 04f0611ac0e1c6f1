//! The JSON Schema of the two files heddle reads, a pipeline file and a `stage.toml`, derived
//! from the serde types of [`crate::spec`] so the schema cannot drift from the parser: a key the
//! parser rejects (`deny_unknown_fields`) is `additionalProperties: false` here, and each field's
//! doc comment is the `description` an editor shows on hover.
//!
//! What the derive cannot see is written here by hand, next to the rule it mirrors:
//! - the custom deserializers of `run`, `inputs` and `gpus` (a string *or* an array or table);
//! - the values `model` parses from strings (`network`, `pull`, `transfer`, a param's `type`,
//!   a `[resources]` pool);
//! - the three places one [`RawStage`] is written: `[stages.NAME]`, `[defaults]` and a
//!   definition's `[stage]` each drop the keys `model` forbids there ([`NOT_IN_DEFAULTS`],
//!   [`NOT_IN_DEFINITION`], [`ONLY_IN_DEFINITION`]), so the schema rejects them as heddle does.
//!
//! Draft 07, the newest draft that every TOML editor integration (taplo / Even Better TOML)
//! and validator reads. TOML has no null, so the `null` schemars adds for an `Option` is
//! removed: an editor should never offer it. The committed files are `schemas/*.schema.json`
//! (`heddle schema pipeline|stage` prints them; `tests/schema.rs` fails when they are stale).

use std::borrow::Cow;

use schemars::generate::SchemaSettings;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde_json::Value;

use crate::spec::{
    GpuSpec, InputSpec, PipelineSpec, RawStage, RunSpec, StageDefSpec, NOT_IN_DEFAULTS,
    NOT_IN_DEFINITION, ONLY_IN_DEFINITION,
};

/// Which file a schema describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaKind {
    /// `pipelines/NAME.toml`.
    Pipeline,
    /// `stages/<group>/<name>/stage.toml`.
    Stage,
}

impl SchemaKind {
    pub const ALL: [SchemaKind; 2] = [SchemaKind::Pipeline, SchemaKind::Stage];

    /// The committed file's name under `schemas/`.
    pub fn file_name(self) -> &'static str {
        match self {
            SchemaKind::Pipeline => "pipeline.schema.json",
            SchemaKind::Stage => "stage.schema.json",
        }
    }

    /// The schema as a JSON value.
    pub fn schema(self) -> Value {
        match self {
            SchemaKind::Pipeline => root::<PipelineSpec>(),
            SchemaKind::Stage => root::<StageDefSpec>(),
        }
    }

    /// The schema as the committed file holds it: pretty JSON ending in a newline.
    pub fn text(self) -> String {
        let mut t = serde_json::to_string_pretty(&self.schema()).expect("a schema is JSON");
        t.push('\n');
        t
    }
}

fn root<T: JsonSchema>() -> Value {
    let schema = SchemaSettings::draft07()
        .into_generator()
        .into_root_schema_for::<T>();
    let mut v = schema.to_value();
    drop_null(&mut v);
    v
}

/// Remove the `null` alternative schemars gives every `Option`: TOML cannot write it.
fn drop_null(v: &mut Value) {
    match v {
        Value::Object(obj) => {
            if let Some(Value::Array(types)) = obj.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let only = types.remove(0);
                    obj.insert("type".into(), only);
                }
            }
            if let Some(Value::Array(values)) = obj.get_mut("enum") {
                values.retain(|x| !x.is_null());
            }
            if let Some(Value::Array(alts)) = obj.get_mut("anyOf") {
                alts.retain(|a| a.get("type").is_none_or(|t| t != "null"));
                if alts.len() == 1 {
                    let Some(Value::Object(only)) = obj.remove("anyOf").map(|mut a| a[0].take())
                    else {
                        unreachable!("anyOf holds schema objects")
                    };
                    for (k, x) in only {
                        obj.entry(k).or_insert(x);
                    }
                }
            }
            obj.values_mut().for_each(drop_null);
        }
        Value::Array(xs) => xs.iter_mut().for_each(drop_null),
        _ => {}
    }
}

/// `schema` with `keys` taken out of its `properties` (and `required`).
fn without(mut schema: Schema, keys: &[&str]) -> Schema {
    if let Some(Value::Object(props)) = schema.get_mut("properties") {
        for k in keys {
            props.remove(*k);
        }
    }
    if let Some(Value::Array(req)) = schema.get_mut("required") {
        req.retain(|r| !keys.iter().any(|k| r == k));
    }
    schema
}

/// `impl JsonSchema` for a type whose schema is written by hand: `inline` ones are written out
/// where they are used, the others become a named definition.
macro_rules! schema_impl {
    (inline $ty:ty, $name:literal, $schema:expr) => {
        impl JsonSchema for $ty {
            fn inline_schema() -> bool {
                true
            }
            fn schema_name() -> Cow<'static, str> {
                $name.into()
            }
            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                $schema
            }
        }
    };
    ($ty:ty, $name:literal, |$g:ident| $schema:expr) => {
        impl JsonSchema for $ty {
            fn schema_name() -> Cow<'static, str> {
                $name.into()
            }
            fn json_schema($g: &mut SchemaGenerator) -> Schema {
                $schema
            }
        }
    };
}

/// [`RawStage`]'s schema without the keys `drop` names, described as `description`.
fn stage_table(g: &mut SchemaGenerator, drop: &[&str], description: &str) -> Schema {
    let mut s = without(RawStage::json_schema(g), drop);
    s.insert("description".into(), description.into());
    s
}

/// `[stages.NAME]`: every stage key but `include`, and `run` unless `uses` gives one.
pub struct PipelineStage;
schema_impl!(PipelineStage, "Stage", |g| {
    let mut s = stage_table(
        g,
        &ONLY_IN_DEFINITION,
        "A stage: `run` (or `uses` a definition), its inputs and outputs, and the settings it overrides.",
    );
    s.insert(
        "anyOf".into(),
        serde_json::json!([{ "required": ["run"] }, { "required": ["uses"] }]),
    );
    s
});

/// `[defaults]`: only the settings a stage inherits.
pub struct DefaultsTable;
schema_impl!(DefaultsTable, "Defaults", |g| stage_table(
    g,
    &NOT_IN_DEFAULTS,
    "Settings every stage inherits; a stage's own, then its definition's, win.",
));

/// A definition's `[stage]`: `run` is required, and what a stage binds is declared elsewhere.
pub struct DefinitionStage;
schema_impl!(DefinitionStage, "DefinitionStage", |g| {
    let mut s = stage_table(
        g,
        &NOT_IN_DEFINITION,
        "`run` and the settings the definition gives its stages; params, inputs and outputs are declared in their own tables.",
    );
    s.insert("required".into(), serde_json::json!(["run"]));
    s
});

/// Any TOML value (a param's value or default, a `with` value).
pub struct AnyValue;
schema_impl!(inline AnyValue, "AnyValue", json_schema!({}));

/// One value of a matrix key.
pub struct MatrixValue;
schema_impl!(inline MatrixValue, "MatrixValue", json_schema!({ "type": ["string", "number", "boolean"] }));

/// A `[resources]` pool, as `crate::pool_spec::parse` reads it.
pub struct PoolValue;
schema_impl!(inline PoolValue, "Pool", json_schema!({
    "anyOf": [
        { "type": "integer", "minimum": 1, "description": "units, held within one run" },
        {
            "type": "object",
            "properties": {
                "units": { "type": "integer", "minimum": 1, "description": "how many units the pool holds" },
                "scope": {
                    "enum": ["run", "machine", "host"],
                    "description": "`run` (default): within one run; `machine`: shared by every heddle process on the machine; `host`: the old spelling of `machine` (warned about)"
                }
            },
            "required": ["units"],
            "additionalProperties": false
        }
    ]
}));

/// A string schema that takes one of `names`.
fn names(names: &[&str]) -> Schema {
    json_schema!({ "type": "string", "enum": names })
}

/// The names `ParamType::parse` accepts.
pub const PARAM_TYPE_NAMES: [&str; 12] = [
    "string", "int", "float", "bool", "list", "table", "str", "integer", "number", "boolean",
    "array", "map",
];
/// The values `Network::parse` accepts.
pub const NETWORK_NAMES: [&str; 3] = ["none", "bridge", "host"];
/// The values `PullPolicy` parses.
pub const PULL_NAMES: [&str; 3] = ["never", "missing", "always"];
/// The values `model::container` reads as a `Transfer`.
pub const TRANSFER_NAMES: [&str; 3] = ["auto", "bind", "archive"];

/// A param's `type`.
pub struct ParamTypeName;
schema_impl!(inline ParamTypeName, "ParamType", names(&PARAM_TYPE_NAMES));
/// A container stage's `network`.
pub struct NetworkName;
schema_impl!(inline NetworkName, "Network", names(&NETWORK_NAMES));
/// A container stage's `pull`.
pub struct PullPolicyName;
schema_impl!(inline PullPolicyName, "PullPolicy", names(&PULL_NAMES));
/// A container stage's `transfer`.
pub struct TransferName;
schema_impl!(inline TransferName, "Transfer", names(&TRANSFER_NAMES));

schema_impl!(inline RunSpec, "Run", json_schema!({
    "anyOf": [
        { "type": "string", "description": "shell form: every template value is shell-quoted" },
        {
            "type": "array",
            "items": { "type": "string" },
            "minItems": 1,
            "description": "exec form: the program and its arguments, template values passed raw"
        }
    ]
}));

schema_impl!(inline InputSpec, "Input", json_schema!({
    "anyOf": [
        {
            "type": "string",
            "description": "another stage's output: \"stage.output\", \"stage[*].output\" (gather), \"stage[k=v].output\" (select)"
        },
        {
            "type": "object",
            "properties": {
                "path": { "type": "string", "description": "a file or folder in the project, relative to its root" }
            },
            "required": ["path"],
            "additionalProperties": false
        }
    ]
}));

schema_impl!(inline GpuSpec, "Gpus", json_schema!({
    "anyOf": [
        { "enum": ["all", "none"] },
        { "type": "integer", "minimum": 1, "description": "how many GPUs" },
        { "type": "array", "items": { "type": "string" }, "description": "device ids" },
        { "type": "string", "pattern": "\\{\\{", "description": "a template rendering to one of the above" }
    ]
}));

#[cfg(test)]
mod tests {
    use super::*;

    fn props(v: &Value, def: &str) -> Vec<String> {
        let mut k: Vec<String> = v["definitions"][def]["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("no definition {def}: {v:#}"))
            .keys()
            .cloned()
            .collect();
        k.sort();
        k
    }

    #[test]
    fn each_context_drops_the_keys_model_forbids_there() {
        let p = SchemaKind::Pipeline.schema();
        let stage = props(&p, "Stage");
        let defaults = props(&p, "Defaults");
        assert!(stage.contains(&"uses".to_string()) && !stage.contains(&"include".into()));
        for k in NOT_IN_DEFAULTS {
            assert!(!defaults.contains(&k.to_string()), "{k} in [defaults]");
        }
        assert!(defaults.contains(&"timeout".to_string()));
        let d = SchemaKind::Stage.schema();
        let def = props(&d, "DefinitionStage");
        for k in NOT_IN_DEFINITION {
            assert!(
                !def.contains(&k.to_string()),
                "{k} in a definition's [stage]"
            );
        }
        assert!(def.contains(&"include".to_string()) && def.contains(&"run".to_string()));
    }

    #[test]
    fn every_table_rejects_unknown_keys() {
        for kind in SchemaKind::ALL {
            let v = kind.schema();
            assert_eq!(v["additionalProperties"], false, "{kind:?} root");
            for (name, d) in v["definitions"].as_object().unwrap() {
                assert_eq!(d["additionalProperties"], false, "{kind:?} {name}");
            }
        }
    }

    #[test]
    fn no_null_and_field_docs_are_descriptions() {
        let text = SchemaKind::Pipeline.text();
        assert!(!text.contains("\"null\""), "{text}");
        let p = SchemaKind::Pipeline.schema();
        let timeout = &p["definitions"]["Stage"]["properties"]["timeout"];
        assert_eq!(timeout["type"], "string");
        assert!(
            timeout["description"]
                .as_str()
                .unwrap()
                .starts_with("A duration such as"),
            "{timeout}"
        );
    }
}
