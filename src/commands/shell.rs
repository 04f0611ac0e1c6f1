//! `heddle completions <shell>` and `heddle man`: the shell completion script and the man
//! page, generated from the same clap definition the binary parses with, so neither can drift
//! from the real options.

use crate::error::{Error, EXIT_OK};

/// The shells heddle writes completions for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
    Powershell,
}

/// The completion script for `shell`, on stdout.
pub fn completions(shell: Shell, mut cmd: clap::Command) -> Result<i32, Error> {
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
        Shell::Powershell => clap_complete::Shell::PowerShell,
    };
    clap_complete::generate(shell, &mut cmd, "heddle", &mut std::io::stdout());
    Ok(EXIT_OK)
}

/// The man page (roff) on stdout: `heddle man > heddle.1`.
pub fn man(cmd: clap::Command) -> Result<i32, Error> {
    clap_mangen::Man::new(cmd)
        .render(&mut std::io::stdout())
        .map_err(|source| Error::Io {
            op: "cannot write the man page to",
            path: "stdout".into(),
            source,
        })?;
    Ok(EXIT_OK)
}
