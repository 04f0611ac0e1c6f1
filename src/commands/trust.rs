//! `heddle trust [--revoke]`: let the project's `.heddle/config.toml` and `.heddle/hosts.toml`
//! choose the remote cache and the engines, as they are now ([`crate::trust`]).

use crate::error::{Error, EXIT_OK};
use crate::printable::printable;
use crate::session::Session;

#[derive(clap::Args, Debug)]
pub struct TrustArgs {
    /// Forget the trust instead: the project's files are ignored again.
    #[arg(long)]
    revoke: bool,
}

pub fn trust(s: &Session, a: &TrustArgs) -> Result<i32, Error> {
    let root = s.project_root();
    let env = |k: &str| std::env::var(k).ok();
    if a.revoke {
        let had = crate::trust::revoke(&root, &env)?;
        let what = if had {
            "no longer trusted"
        } else {
            "was not trusted"
        };
        println!("{what}: {}", printable(&root.display().to_string()));
        return Ok(EXIT_OK);
    }
    match crate::trust::grant(&root, &env)? {
        Some(g) => println!(
            "{}",
            printable(&format!(
                "trusted {}: {} as they are now (a change to them needs `heddle trust` again)",
                g.root.display(),
                g.files.join(", ")
            ))
        ),
        None => println!(
            "{}",
            printable(&format!(
                "nothing to trust in {}: it has no {}",
                root.display(),
                crate::trust::PROJECT_FILES.join(" or ")
            ))
        ),
    }
    Ok(EXIT_OK)
}
