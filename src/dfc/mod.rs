//! Bring your DFC: the `[dfc]` settings ([`config`]), the route they choose and what it changes
//! in a pipeline ([`route`]), and route (b)'s image built from the shipped recipe ([`recipe`]).
//! README, section "Bring your DFC", is the user's side of this module.

pub mod config;
pub mod recipe;
pub mod route;

use std::path::Path;

pub use route::{Route, RouteError};

/// The route `project_root`'s config files choose.
pub fn route_for(project_root: &Path) -> Result<Route, crate::error::Error> {
    let env = |k: &str| std::env::var(k).ok();
    let files = config::files(project_root, &env);
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let c = config::load(&files, project_root, home.as_deref())?;
    Ok(Route::resolve(&c, project_root)?)
}
