//! Diagnostics exactly as a user reads them: a pipeline's text (and the definitions it uses)
//! in, the rendered errors out, compared with the snapshots in `snapshots/`. The CLI prints
//! these same texts; `tests/cli/output.rs` checks that it exits 2 with them.
//!
//! Update a snapshot after an intended change with `INSTA_UPDATE=always cargo test -p
//! heddle-runner --test diagnostics` and review the diff.

use std::path::Path;
use std::sync::Arc;

use heddle_runner::model::{load_str, LoadError, LoadOptions};

/// A temporary project: the pipeline is `pipelines/p.toml`; definitions go in `stages/`.
struct Project {
    dir: tempfile::TempDir,
}

impl Project {
    fn new() -> Project {
        Project {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn file(self, rel: &str, text: &str) -> Project {
        let path = self.dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        self
    }

    fn def(self, name: &str, text: &str) -> Project {
        self.file(&format!("stages/{name}/stage.toml"), text)
    }

    /// The diagnostics of loading, else of planning, with the temporary root as `[ROOT]`.
    fn errors(&self, pipeline: &str) -> String {
        let opts = LoadOptions {
            root: Some(self.dir.path().to_path_buf()),
            stage_lib: Some(self.dir.path().join(".heddle/stage-lib")),
            ..LoadOptions::default()
        };
        let file = Path::new("pipelines/p.toml");
        let text = match load_str(file, pipeline.to_string(), &opts) {
            Err(LoadError::Invalid(d)) => d.to_string(),
            Err(e) => e.to_string(),
            Ok(p) => match heddle_runner::plan::build(Arc::new(p)) {
                Err(d) => d.to_string(),
                Ok(_) => panic!("the pipeline is valid:\n{pipeline}"),
            },
        };
        let root = self.dir.path().to_string_lossy().into_owned();
        text.replace(&root, "[ROOT]")
    }
}

fn errors(pipeline: &str) -> String {
    Project::new().errors(pipeline)
}

const HEAD: &str = "[pipeline]\nname = \"p\"\n";

#[test]
fn bad_toml() {
    insta::assert_snapshot!(errors(&format!("{HEAD}[stages.a\nrun = \"x\"\n")));
}

#[test]
fn unknown_key() {
    insta::assert_snapshot!(errors(&format!(
        "{HEAD}[stages.a]\nrun = \"x\"\ntimout = \"5m\"\n"
    )));
}

#[test]
fn wrong_type() {
    insta::assert_snapshot!(errors(&format!(
        "{HEAD}[stages.a]\nrun = \"x\"\nretries = \"two\"\n"
    )));
}

#[test]
fn duplicate_stage() {
    insta::assert_snapshot!(errors(&format!(
        "{HEAD}[stages.a]\nrun = \"x\"\n[stages.a]\nrun = \"y\"\n"
    )));
}

#[test]
fn unknown_stage_reference() {
    insta::assert_snapshot!(errors(&format!(
        "{HEAD}[stages.make]\nrun = \"x\"\noutputs = {{ o = \"o\" }}\n[stages.use]\ninputs = {{ i = \"mkae.o\" }}\nrun = \"x\"\n"
    )));
}

#[test]
fn unknown_output() {
    insta::assert_snapshot!(errors(&format!(
        "{HEAD}[stages.a]\nrun = \"x\"\noutputs = {{ text = \"t\" }}\n[stages.b]\ninputs = {{ i = \"a.txet\" }}\nrun = \"x\"\n"
    )));
}

#[test]
fn cycle() {
    insta::assert_snapshot!(errors(&format!(
        "{HEAD}[stages.a]\ninputs = {{ i = \"b.o\" }}\nrun = \"x\"\noutputs = {{ o = \"o\" }}\n\
         [stages.b]\ninputs = {{ i = \"a.o\" }}\nrun = \"x\"\noutputs = {{ o = \"o\" }}\n"
    )));
}

#[test]
fn missing_input_file() {
    insta::assert_snapshot!(errors(&format!(
        "{HEAD}[stages.a]\ninputs = {{ i = {{ path = \"no/such.txt\" }} }}\nrun = \"x\"\n"
    )));
}

#[test]
fn unknown_template_variables() {
    insta::assert_snapshot!(errors(&format!(
        "{HEAD}[params]\ngreeting = \"hi\"\n[stages.a]\nmatrix = {{ k = [1] }}\n\
         run = \"echo {{{{ params.greting }}}} {{{{ matrix.j }}}} {{{{ nope }}}}\"\n"
    )));
}

#[test]
fn inherited_values_from_stage_toml_point_at_stage_toml() {
    let p = Project::new().def(
        "g/d",
        "[stage]\nrun = \"x\"\nretries = 101\nresources = { gpu = 1 }\nnetwork = \"lan\"\nimage = \"i\"\n",
    );
    insta::assert_snapshot!(p.errors(&format!("{HEAD}[stages.s]\nuses = \"g/d\"\n")));
}

#[test]
fn container_keys_point_at_the_key() {
    insta::assert_snapshot!(errors(&format!(
        "{HEAD}[defaults]\nimage = \"i\"\n[stages.a]\nrun = \"x\"\npull = \"sometimes\"\nshm_size = \"big\"\n"
    )));
}

#[test]
fn definition_params_and_inputs() {
    let p = Project::new().def(
        "text/shout",
        "[stage]\nrun = \"x\"\n[params]\ntimes = { type = \"int\" }\nloud = { type = \"bool\", default = false }\n[inputs]\ntext = {}\n",
    );
    insta::assert_snapshot!(p.errors(&format!(
        "{HEAD}[stages.s]\nuses = \"text/shout\"\nwith = {{ times = 1.5, lodu = true }}\ninputs = {{ txt = {{ path = \"x\" }} }}\n"
    )));
}

#[test]
fn unknown_uses_and_no_run() {
    insta::assert_snapshot!(errors(&format!(
        "{HEAD}[stages.a]\nuses = \"no/such\"\n[stages.b]\noutputs = {{ o = \"o\" }}\n"
    )));
}

/// Each kind of unknown name suggests the nearest known one.
#[test]
fn suggestions_for_misspelt_names() {
    insta::assert_snapshot!(errors(&format!(
        "{HEAD}[params]\ngreeting = \"hi\"\n[stages.make]\nmatrix = {{ size = [1, 2] }}\n\
         run = \"x\"\noutputs = {{ result = \"r\" }}\n\
         [stages.use]\ninputs = {{ text = \"make[sise=1].result\" }}\n\
         run = \"echo {{{{ parms.greeting }}}} {{{{ in.txt }}}} {{{{ out.reslt }}}} {{{{ matrix.sise }}}}\"\n\
         outputs = {{ result = \"r\" }}\n"
    )));
}

#[test]
fn a_misspelt_set_suggests_the_param() {
    let opts = LoadOptions {
        overrides: vec![("greting".into(), "hi".into())],
        root: Some(std::env::temp_dir()),
        ..LoadOptions::default()
    };
    let text = format!("{HEAD}[params]\ngreeting = \"hello\"\n[stages.a]\nrun = \"x\"\n");
    let err = load_str(Path::new("p.toml"), text, &opts).unwrap_err();
    insta::assert_snapshot!(err.to_string());
}

#[test]
fn unknown_pool_and_env() {
    insta::assert_snapshot!(errors(&format!(
        "{HEAD}[resources]\ngpu = 1\n[stages.a]\nrun = \"x\"\nresources = {{ gpus = 1 }}\nenv = \"py\"\ntimeout = \"soon\"\n"
    )));
}
