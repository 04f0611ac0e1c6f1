//! Param values: their declared types, coercion of rendered text (`--set`, templated `with`),
//! and the conversions between TOML and the JSON values the planner and cache keys carry.

use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamType {
    String,
    Int,
    Float,
    Bool,
    List,
    Table,
}

impl ParamType {
    pub(crate) fn parse(s: &str) -> Option<ParamType> {
        Some(match s {
            "string" | "str" => ParamType::String,
            "int" | "integer" => ParamType::Int,
            "float" | "number" => ParamType::Float,
            "bool" | "boolean" => ParamType::Bool,
            "list" | "array" => ParamType::List,
            "table" | "map" => ParamType::Table,
            _ => return None,
        })
    }

    pub fn of(v: &Value) -> ParamType {
        match v {
            Value::String(_) | Value::Null => ParamType::String,
            Value::Number(n) if n.is_i64() || n.is_u64() => ParamType::Int,
            Value::Number(_) => ParamType::Float,
            Value::Bool(_) => ParamType::Bool,
            Value::Array(_) => ParamType::List,
            Value::Object(_) => ParamType::Table,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ParamType::String => "string",
            ParamType::Int => "int",
            ParamType::Float => "float",
            ParamType::Bool => "bool",
            ParamType::List => "list",
            ParamType::Table => "table",
        }
    }

    /// Coerce a value to this type: a rendered template is text, so "4" becomes 4 for an int.
    pub fn coerce(self, v: Value) -> Result<Value, ParamValueError> {
        let got = ParamType::of(&v);
        if got == self {
            return Ok(v);
        }
        match (self, &v) {
            (ParamType::Float, Value::Number(n)) => {
                Ok(serde_json::json!(n.as_f64().unwrap_or_default()))
            }
            (_, Value::String(s)) => {
                let parsed = parse_value_text(s);
                let pt = ParamType::of(&parsed);
                if pt == self || (self == ParamType::Float && pt == ParamType::Int) {
                    self.coerce(parsed)
                } else {
                    Err(ParamValueError::NotText {
                        expected: self,
                        text: s.clone(),
                    })
                }
            }
            _ => Err(ParamValueError::WrongType {
                expected: self,
                got,
                value: v,
            }),
        }
    }
}

/// Parse a `--set` or rendered value as a TOML value when it is one (`4`, `true`, `[1,2]`),
/// else keep it as a string.
pub fn parse_value_text(s: &str) -> Value {
    let doc = format!("v = {s}");
    match toml::from_str::<toml::Table>(&doc) {
        Ok(t) => t
            .get("v")
            .map(toml_to_json)
            .unwrap_or(Value::String(s.into())),
        Err(_) => Value::String(s.to_string()),
    }
}

pub fn toml_to_json(v: &toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => serde_json::json!(f),
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.clone(), toml_to_json(v)))
                .collect(),
        ),
    }
}

pub use heddle_schema::value_text;

#[derive(Debug, Clone)]
pub struct ParamDef {
    pub ty: ParamType,
    pub default: Option<Value>,
    pub choices: Option<Vec<Value>>,
    pub description: Option<String>,
}

/// A param value its definition does not accept.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamValueError {
    /// Text (`--set`, a rendered template) that does not read as the type.
    #[error("expected {}, got \"{text}\"", .expected.name())]
    NotText { expected: ParamType, text: String },
    #[error("expected {}, got {} {value}", .expected.name(), .got.name())]
    WrongType {
        expected: ParamType,
        got: ParamType,
        value: Value,
    },
    #[error("`{}` is not one of {}", value_text(.value), .choices.iter().map(value_text).collect::<Vec<_>>().join(", "))]
    NotAChoice { value: Value, choices: Vec<Value> },
}

pub(crate) fn check_choice(pd: &ParamDef, v: &Value) -> Option<ParamValueError> {
    let choices = pd.choices.as_ref()?;
    if choices.contains(v) {
        None
    } else {
        Some(ParamValueError::NotAChoice {
            value: v.clone(),
            choices: choices.clone(),
        })
    }
}

/// Check a coerced param value against its definition (used at plan time for templated `with`).
pub fn check_param(pd: &ParamDef, v: Value) -> Result<Value, ParamValueError> {
    let v = pd.ty.coerce(v)?;
    match check_choice(pd, &v) {
        Some(e) => Err(e),
        None => Ok(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coercion_of_rendered_text() {
        assert_eq!(
            ParamType::Int.coerce(Value::String("4".into())).unwrap(),
            Value::from(4)
        );
        assert_eq!(
            ParamType::Int
                .coerce(Value::String("four".into()))
                .unwrap_err()
                .to_string(),
            "expected int, got \"four\""
        );
        assert_eq!(
            ParamType::Int
                .coerce(Value::Bool(true))
                .unwrap_err()
                .to_string(),
            "expected int, got bool true"
        );
        assert_eq!(
            ParamType::Float.coerce(Value::from(1)).unwrap(),
            serde_json::json!(1.0)
        );
        assert_eq!(parse_value_text("[1, 2]"), serde_json::json!([1, 2]));
        assert_eq!(
            parse_value_text("hi there"),
            Value::String("hi there".into())
        );
    }
}
