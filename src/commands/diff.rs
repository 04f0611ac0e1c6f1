//! `heddle diff [RUN_A] [RUN_B] [--all] [--json]`: what changed between two runs, as DVC users
//! ask with `dvc params diff` and `dvc metrics diff`: the params, the instances whose keys
//! changed and why, and the numbers of the report tables that moved, side by side with their
//! deltas (`--all`: every number). The comparison
//! is `heddle_report::diff`; this reads the two runs and prints it.

use heddle_report::diff::{diff as diff_runs, RunSide};
use heddle_runner::record::{self, RunRecord};

use crate::artefacts::tables;
use crate::error::{Error, EXIT_OK};
use crate::printable::printable;
use crate::session::Session;

#[derive(clap::Args, Debug)]
pub struct DiffArgs {
    /// Run A (an id, a unique prefix, or `last`); default: the run of B's pipeline before B.
    a: Option<String>,
    /// Run B; default: the last run.
    b: Option<String>,
    /// The comparison as JSON (always every number).
    #[arg(long)]
    json: bool,
    /// Print every number of every table, not only those that moved.
    #[arg(long)]
    all: bool,
}

pub fn diff(s: &Session, args: &DiffArgs) -> Result<i32, Error> {
    let root = s.project_root();
    let (a, b) = match (&args.a, &args.b) {
        (Some(a), Some(b)) => (record::load(&root, a)?, record::load(&root, b)?),
        (Some(a), None) => (record::load(&root, a)?, record::load(&root, "last")?),
        (None, _) => {
            let b = record::load(&root, args.b.as_deref().unwrap_or("last"))?;
            (previous_run(&root, &b)?, b)
        }
    };
    let store = s.open_store()?;
    let (ta, tb) = (tables(&store, &root, &a), tables(&store, &root, &b));
    let d = diff_runs(
        RunSide {
            record: &a,
            tables: &ta,
        },
        RunSide {
            record: &b,
            tables: &tb,
        },
    );
    if args.json {
        println!("{}", serde_json::to_string_pretty(&d).expect("json"));
    } else {
        // Params, labels and table cells are the user's and the stages' text.
        print!("{}", printable(&d.text(args.all)));
    }
    Ok(EXIT_OK)
}

/// The latest run of `b`'s pipeline recorded before `b`.
fn previous_run(root: &std::path::Path, b: &RunRecord) -> Result<RunRecord, Error> {
    let ids = record::list(root);
    let before = ids.iter().rev().skip_while(|id| **id != b.run_id).skip(1);
    for id in before {
        if let Ok(r) = record::load(root, id) {
            if r.pipeline == b.pipeline {
                return Ok(r);
            }
        }
    }
    Err(Error::Usage(format!(
        "no run of pipeline {} before run {} to compare with; name both: heddle diff RUN_A RUN_B",
        b.pipeline, b.run_id
    )))
}
