//! `{{ host.NAME }}` in a param's default value (a definition's `[params]` or a pipeline's
//! `[params]`): facts about the machine heddle runs on, rendered once when the file is loaded, so
//! everything after (`with`, `run`, records, locks) sees a plain value.
//!
//! Why: a stage that runs on the host that holds a device needs that host's Python, and its usual
//! name differs by platform. `host.python` is `python` on Windows (python.org's installer puts
//! `python.exe` and the `py` launcher on PATH, not `python3.exe`) and `python3` elsewhere (PEP
//! 394: `python` may be absent or Python 2 there).

use crate::template::{LookupError, Rendered, Template, TemplateError};

/// The variables this module knows, for error messages.
pub const NAMES: &[&str] = &["host.python"];

/// The usual name of the Python 3 interpreter on this platform.
pub fn python() -> &'static str {
    if cfg!(windows) {
        "python"
    } else {
        "python3"
    }
}

/// [`NAMES`] as templates, for error messages: `{{ host.python }}`.
fn names_listed() -> String {
    NAMES
        .iter()
        .map(|n| format!("{{{{ {n} }}}}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn lookup(path: &[String]) -> Result<Rendered, LookupError> {
    match path {
        [ns, k] if ns == "host" && k == "python" => Ok(Rendered::One(python().to_string())),
        _ => Err(LookupError::NotAHostVariable {
            path: path.to_vec(),
            allowed: names_listed(),
        }),
    }
}

/// `text` with its `{{ host.NAME }}` variables rendered; text without `{{` unchanged.
pub fn render(text: &str) -> Result<String, TemplateError> {
    if !text.contains("{{") {
        return Ok(text.to_string());
    }
    Template::parse(text)?.render_plain(lookup)
}

/// A param value (JSON) with `render` applied to a string; other values unchanged.
pub fn render_value(v: serde_json::Value) -> Result<serde_json::Value, TemplateError> {
    match v {
        serde_json::Value::String(s) => render(&s).map(serde_json::Value::String),
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_host_python_and_leaves_plain_text() {
        assert_eq!(render("{{ host.python }}").unwrap(), python());
        assert_eq!(
            render("/opt/{{host.python}}-x").unwrap(),
            format!("/opt/{}-x", python())
        );
        assert_eq!(render("python3.11").unwrap(), "python3.11");
        let e = render("{{ params.x }}").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown variable `params.x` in a param value (a param value may use {{ host.python }})"
        );
    }
}
