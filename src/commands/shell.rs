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
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "heddle", &mut script);
    write_stdout(&script, "cannot write the completion script to")?;
    Ok(EXIT_OK)
}

/// The man page (roff) on stdout: `heddle man > heddle.1`.
pub fn man(cmd: clap::Command) -> Result<i32, Error> {
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut page)
        .map_err(|source| Error::Io {
            op: "cannot render the man page to",
            path: "memory".into(),
            source,
        })?;
    write_stdout(&page, "cannot write the man page to")?;
    Ok(EXIT_OK)
}

/// Writes `bytes` to stdout; a reader that went away (`heddle man | head`) is not an error:
/// it took what it wanted. Rendering first and writing once also means a closed pipe can never
/// leave clap's generators half way through a `write!` they unwrap.
pub fn write_stdout(bytes: &[u8], op: &'static str) -> Result<(), Error> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(source) => Err(Error::Io {
            op,
            path: "stdout".into(),
            source,
        }),
        Ok(()) => Ok(()),
    }
}
