//! `heddle schema pipeline|stage`: the JSON Schema of a pipeline file or of a `stage.toml`, as
//! editors read it for completion, hover text and validation (taplo / Even Better TOML, through
//! a `#:schema PATH` first line). The schema is derived from the parser's own types
//! (`heddle_runner::spec_schema`), so it is the one this heddle applies; the repository commits
//! it as `schemas/*.schema.json` and `heddle init` writes a copy into a new project.

use heddle_runner::spec_schema::SchemaKind;

use crate::error::{Error, EXIT_OK};

/// Which file's schema.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum SchemaArg {
    /// A pipeline file, `pipelines/NAME.toml`.
    Pipeline,
    /// A stage definition, `stages/<group>/<name>/stage.toml`.
    Stage,
}

impl SchemaArg {
    pub fn kind(self) -> SchemaKind {
        match self {
            SchemaArg::Pipeline => SchemaKind::Pipeline,
            SchemaArg::Stage => SchemaKind::Stage,
        }
    }
}

pub fn schema(which: SchemaArg) -> Result<i32, Error> {
    print!("{}", which.kind().text());
    Ok(EXIT_OK)
}
