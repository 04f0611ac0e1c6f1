//! `heddle dag`: the instance graph, as text (`label <- deps`) or Graphviz dot.

use heddle_runner::plan::Plan;

use crate::error::{Error, EXIT_OK};
use crate::printable::{printable_line, say};
use crate::session::{PipelineArgs, Session};

#[derive(clap::Args, Debug)]
pub struct DagArgs {
    #[command(flatten)]
    p: PipelineArgs,
    #[arg(long, value_enum, default_value_t = DagFormat::Text)]
    format: DagFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DagFormat {
    Text,
    Dot,
}

pub fn dag(s: &Session, a: &DagArgs) -> Result<i32, Error> {
    let plan = s.load_plan(&a.p)?;
    match a.format {
        DagFormat::Text => print_text(&plan),
        DagFormat::Dot => print_dot(&plan),
    }
    Ok(EXIT_OK)
}

fn print_text(plan: &Plan) {
    for inst in &plan.instances {
        if inst.deps.is_empty() {
            say!("{}", inst.label);
        } else {
            let deps: Vec<&str> = inst
                .deps
                .iter()
                .map(|d| plan.instances[*d].label.as_str())
                .collect();
            say!("{} <- {}", inst.label, deps.join(", "));
        }
    }
}

fn print_dot(plan: &Plan) {
    println!("digraph \"{}\" {{", plan.pipeline.name);
    println!("  rankdir=LR;");
    for inst in &plan.instances {
        println!(
            "  n{} [label=\"{}\"];",
            inst.id,
            printable_line(&inst.label).replace('"', "\\\"")
        );
    }
    for e in plan.graph.edge_indices() {
        let (a, b) = plan.graph.edge_endpoints(e).expect("edge");
        println!("  n{} -> n{};", a.index(), b.index());
    }
    println!("}}");
}
