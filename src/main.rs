//! The `heddle` command: parses arguments, hands validated input to `heddle-runner`, renders
//! its events, and maps every outcome to a documented exit code:
//! 0 success, 1 a stage failed, 2 invalid pipeline, usage or environment, 130 interrupted.

mod cli;
mod logbook;
mod report;

fn main() {
    let code = cli::main();
    std::process::exit(code);
}
