//! The loader on TOML strings: a pipeline's text in, the model or its diagnostics out. A
//! temporary project folder holds the few `stages/<name>/stage.toml` definitions a test needs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::diag::Diagnostic;

struct Project {
    dir: tempfile::TempDir,
}

impl Project {
    fn new() -> Project {
        Project {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// A project whose one definition, `g/d`, is `toml`.
    fn with_definition(toml: &str) -> Project {
        Project::new().def("g/d", toml)
    }

    /// Write `stages/<name>/stage.toml`.
    fn def(self, name: &str, toml: &str) -> Project {
        let dir = self.dir.path().join("stages").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("stage.toml"), toml).unwrap();
        self
    }

    fn def_file(&self, name: &str) -> PathBuf {
        self.dir.path().join("stages").join(name).join("stage.toml")
    }

    fn load_with(&self, text: &str, overrides: &[(&str, &str)]) -> Result<Pipeline, LoadError> {
        let opts = LoadOptions {
            overrides: overrides
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            root: Some(self.dir.path().to_path_buf()),
            stage_lib: Some(self.dir.path().join("lib")),
        };
        load_str(Path::new("p.toml"), text.to_string(), &opts)
    }

    /// The model of the pipeline whose text is [`HEAD`] and then `body`.
    fn load(&self, body: &str) -> Pipeline {
        self.load_with(&format!("{HEAD}{body}"), &[])
            .unwrap_or_else(|e| panic!("load failed:\n{e}"))
    }

    /// The diagnostics of the pipeline whose text is [`HEAD`] and then `body`.
    fn errors(&self, body: &str) -> Vec<Diagnostic> {
        match self.load_with(&format!("{HEAD}{body}"), &[]) {
            Ok(_) => panic!("loaded, expected errors"),
            Err(LoadError::Invalid(d)) => d.0,
            Err(e) => panic!("expected diagnostics, got {e}"),
        }
    }
}

const HEAD: &str = "[pipeline]\nname = \"p\"\n";

fn messages(ds: &[Diagnostic]) -> Vec<&str> {
    ds.iter().map(|d| d.message.as_str()).collect()
}

#[test]
fn a_minimal_pipeline_has_the_documented_defaults() {
    let p =
        Project::new().load("[stages.b]\nrun = \"echo b\"\n[stages.a]\nrun = [\"echo\", \"a\"]\n");
    assert_eq!(p.name, "p");
    let names: Vec<_> = p.stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["b", "a"], "stages keep file order");
    let s = &p.stages[0];
    assert_eq!(s.settings.timeout, None);
    assert_eq!(s.settings.retries, 0);
    assert!(s.settings.cache && !s.settings.report && !s.settings.allow_failure);
    assert!(s.container.is_none() && s.settings.env.is_none() && s.def.is_none());
    assert!(matches!(p.stages[1].run, RunTemplate::Exec(ref a) if a.len() == 2));
}

#[test]
fn settings_follow_stage_then_definition_then_defaults() {
    let p = Project::new()
        .def(
            "g/d",
            "[stage]\nrun = \"x\"\ntimeout = \"5m\"\nretries = 2\nvars = { A = \"def\", B = \"def\" }\npass_env = [\"HOME\"]\n",
        )
        .load("[defaults]\ntimeout = \"1h\"\nretries = 9\ncache = false\nvars = { A = \"dflt\", C = \"dflt\" }\npass_env = [\"USER\", \"HOME\"]\n\
             [stages.own]\nuses = \"g/d\"\nretries = 1\nvars = { B = \"own\" }\n\
             [stages.bare]\nrun = \"y\"\n");
    let own = &p.stages[0];
    assert_eq!(
        own.settings.timeout,
        Some(Duration::from_secs(300)),
        "definition over defaults"
    );
    assert_eq!(own.settings.retries, 1, "stage over definition");
    assert!(!own.settings.cache, "defaults when neither sets it");
    let vars: Vec<_> = own
        .settings
        .vars
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    assert_eq!(vars, ["A=def", "B=own", "C=dflt"]);
    assert_eq!(
        own.settings.pass_env,
        ["USER", "HOME"],
        "merged, first mention kept"
    );
    let bare = &p.stages[1];
    assert_eq!(bare.settings.timeout, Some(Duration::from_secs(3600)));
    assert_eq!(bare.settings.retries, 9);
}

#[test]
fn values_from_stage_toml_are_reported_in_stage_toml() {
    let proj = Project::with_definition(
        "[stage]\nrun = \"x\"\nretries = 101\nresources = { gpu = 1 }\nenv = \"ort\"\ntimeout = \"soon\"\n",
    );
    let errs = proj.errors("[stages.s]\nuses = \"g/d\"\n");
    assert_eq!(
        messages(&errs),
        [
            "timeout `soon`: expected number at 0 (write e.g. \"90s\", \"10m\", \"2h\")",
            "retries must be between 0 and 100",
            "unknown resource pool `gpu`",
            "unknown env `ort`",
        ]
    );
    for (d, line) in errs.iter().zip([6, 3, 4, 5]) {
        assert_eq!(d.path, proj.def_file("g/d"), "{d}");
        assert_eq!(d.line, line, "{d}");
    }
}

#[test]
fn a_timeout_from_defaults_is_reported_in_the_pipeline_even_with_a_definition() {
    let proj = Project::with_definition("[stage]\nrun = \"x\"\n");
    let errs = proj.errors("[defaults]\ntimeout = \"soon\"\n[stages.s]\nuses = \"g/d\"\n");
    assert_eq!(errs.len(), 1);
    assert_eq!(
        (errs[0].path.as_path(), errs[0].line),
        (Path::new("p.toml"), 4)
    );
}

#[test]
fn container_keys_parse_to_enums_and_errors_point_at_the_key() {
    let proj = Project::with_definition(
        "[stage]\nrun = \"x\"\nimage = \"img:{{ params.tag }}\"\nnetwork = \"bridge\"\n[params]\ntag = { type = \"string\", default = \"1\" }\n",
    );
    let p = proj.load(
        "[stages.s]\nuses = \"g/d\"\npull = \"missing\"\n[stages.t]\nrun = \"y\"\nimage = \"i\"\n",
    );
    let c = p.stages[0].container.as_ref().unwrap();
    assert_eq!((c.network, c.pull), (Network::Bridge, PullPolicy::Missing));
    assert!(c.image_in_def && !c.gpus_in_def);
    let t = p.stages[1].container.as_ref().unwrap();
    assert_eq!((t.network, t.pull), (Network::None, PullPolicy::Never));
    assert_eq!(serde_json::to_value(t.network).unwrap(), json!("none"));

    let errs = proj.errors("[stages.s]\nrun = \"y\"\nimage = \"i\"\n\nnetwork = \"lan\"\npull = \"sometimes\"\nshm_size = \"big\"\ngpus = 0\n");
    let at: Vec<_> = errs.iter().map(|d| (d.line, d.col)).collect();
    assert_eq!(at, [(7, 11), (8, 8), (9, 12), (10, 8)], "{errs:?}");
}

#[test]
fn a_bad_binding_of_a_required_input_is_reported_once() {
    let proj = Project::with_definition(
        "[stage]\nrun = \"x\"\n[inputs.src]\n[inputs.opt]\noptional = true\n",
    );
    let errs = proj.errors(
        "[stages.a]\nuses = \"g/d\"\ninputs = { src = \"nowhere.out\" }\n\
         [stages.b]\nuses = \"g/d\"\n",
    );
    assert_eq!(
        messages(&errs),
        [
            "input `src` refers to unknown stage `nowhere`",
            // Stage `b` binds nothing: its own error, not hidden by `a`'s mention of `src`.
            "stage `b` must bind input `src` of `g/d`",
        ]
    );
}

#[test]
fn a_broken_definition_is_reported_once_however_many_stages_use_it() {
    let proj = Project::with_definition("[stage]\nrun = \"x\"\nbogus = 1\n");
    let errs = proj.errors("[stages.a]\nuses = \"g/d\"\n[stages.b]\nuses = \"g/d\"\n");
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].path, proj.def_file("g/d"));
    let missing = proj.errors("[stages.a]\nuses = \"g/x\"\n[stages.b]\nuses = \"g/x\"\n");
    assert_eq!(missing.len(), 2, "a missing one is reported at each `uses`");
}

#[test]
fn with_values_are_type_checked_and_required_params_enforced() {
    let proj = Project::with_definition(
        "[stage]\nrun = \"x\"\n[params]\nn = { type = \"int\" }\nmode = { type = \"string\", default = \"a\", choices = [\"a\", \"b\"] }\n",
    );
    let p = proj.load("[params]\nk = 3\n[stages.s]\nuses = \"g/d\"\nwith = { n = \"{{ params.k }}\", mode = \"b\" }\n");
    assert!(matches!(p.stages[0].with["n"].0, WithValue::Template(_)));
    assert!(matches!(&p.stages[0].with["mode"].0, WithValue::Literal(v) if v == &json!("b")));

    let errs = proj.errors(
        "[stages.s]\nuses = \"g/d\"\nwith = { mode = \"c\", nn = 1 }\n\
         [stages.t]\nuses = \"g/d\"\nwith = { n = \"{{ params.nope }}\" }\n\
         [stages.u]\nrun = \"x\"\nwith = { n = 1 }\n",
    );
    assert_eq!(
        messages(&errs),
        [
            "param `mode` of `g/d`: `c` is not one of a, b",
            "`g/d` has no param `nn`",
            "stage `s` must set param `n` of `g/d` in `with`",
            "unknown variable `params.nope` in `with.n`",
            "`with` needs `uses`; stage `u` has no definition",
        ]
    );
}

#[test]
fn an_empty_with_table_is_not_an_error() {
    let p = Project::new().load("[stages.s]\nrun = \"x\"\nwith = {}\n");
    assert!(p.stages[0].with.is_empty());
}

#[test]
fn matrix_values_must_be_distinct_scalars() {
    let proj = Project::new();
    let p = proj.load("[stages.s]\nrun = \"x\"\nmatrix = { b = [1, 2], a = [\"x\"] }\n");
    let keys: Vec<_> = p.stages[0].matrix.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["a", "b"]);
    let errs =
        proj.errors("[stages.s]\nrun = \"x\"\nmatrix = { a = [], b = [1, \"1\"], c = [[1]] }\n");
    assert_eq!(
        messages(&errs),
        [
            "matrix key `a` has no values",
            "matrix key `b` repeats the value `1`",
            "matrix key `c`: values must be strings, numbers or booleans",
        ]
    );
}

#[test]
fn overrides_keep_the_param_type() {
    let proj = Project::new();
    let text = format!("{HEAD}[params]\nn = 1\nname = \"a\"\n[stages.s]\nrun = \"x\"\n");
    let p = proj.load_with(&text, &[("n", "4"), ("name", "4")]).unwrap();
    assert_eq!(p.params["n"], json!(4));
    assert_eq!(p.params["name"], json!("4"));
    let usage = |o: &[(&str, &str)]| match proj.load_with(&text, o) {
        Err(e @ (LoadError::UnknownParam { .. } | LoadError::WrongType { .. })) => e.to_string(),
        other => panic!("expected a usage error, got {other:?}"),
    };
    assert_eq!(usage(&[("n", "four")]), "--set n=four: param `n` is an int");
    assert_eq!(
        usage(&[("m", "1")]),
        "--set m=1: the pipeline has no param `m` (params: n, name)"
    );
}

#[test]
fn defaults_reject_keys_that_are_not_inherited() {
    let errs = Project::new()
        .errors("[defaults]\nrun = \"x\"\nmatrix = { a = [1] }\n[stages.s]\nrun = \"x\"\n");
    assert_eq!(
        messages(&errs),
        [
            "`matrix` is not allowed in [defaults]",
            "`run` is not allowed in [defaults]"
        ]
    );
}

/// The names the JSON Schema offers are the ones the model parses (the schema is generated
/// from the spec types, which hold these as plain strings).
#[test]
fn named_values_are_the_ones_model_parses() {
    use crate::spec_schema::{NETWORK_NAMES, PARAM_TYPE_NAMES, PULL_NAMES};
    for n in PARAM_TYPE_NAMES {
        assert!(ParamType::parse(n).is_some(), "{n}");
    }
    for n in NETWORK_NAMES {
        assert!(Network::parse(n).is_some(), "{n}");
    }
    for n in PULL_NAMES {
        assert!(n.parse::<PullPolicy>().is_ok(), "{n}");
    }
}
