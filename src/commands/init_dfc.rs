//! `heddle init --example compile-onnx-dfc` with the route to the DFC (README, "Bring your DFC"):
//! the `.heddle/config.toml` it writes beside the pipeline, `[dfc]` set for route (a), (b) or
//! (c), or, with no `--dfc-*` flag, the three routes commented out for the user to pick.

use std::path::PathBuf;

use crate::error::Error;

#[derive(clap::Args, Debug, Default)]
pub struct DfcArgs {
    /// Route (a): the AI Software Suite image as `docker load` named it
    /// (e.g. hailo_ai_sw_suite_2025-10:1).
    #[arg(long, value_name = "IMAGE", conflicts_with = "dfc_wheel")]
    dfc_image: Option<String>,
    /// Route (a): the interpreter inside the image that imports hailo_sdk_client.
    #[arg(long, value_name = "PATH", requires = "dfc_image")]
    dfc_python: Option<String>,
    /// Route (a): the user to run the image as (the suite's files belong to `hailo`).
    #[arg(long, value_name = "USER", requires = "dfc_image")]
    dfc_user: Option<String>,
    /// Routes (b) and (c): the DFC wheel you downloaded
    /// (hailo_dataflow_compiler-<version>-py3-none-linux_x86_64.whl).
    #[arg(long, value_name = "WHEEL")]
    dfc_wheel: Option<PathBuf>,
    /// Route (c): install the wheel in a python env on this host instead of building an image.
    #[arg(long, requires = "dfc_wheel")]
    dfc_on_host: bool,
}

/// The config file init writes, and the route it names in its message.
pub struct Config {
    pub text: String,
    pub route: String,
}

const HEADER: &str =
    "# heddle's settings for this checkout (README, \"Bring your DFC\"); `--set` wins over them.\n";

/// The three routes, commented out: the config for a DFC example when no route was given.
const CHOICES: &str = r#"[dfc]
# Pick one route to the Hailo Dataflow Compiler (heddle run names them too when none is set):
# (a) the AI Software Suite image you loaded with `docker load`:
# image  = "hailo_ai_sw_suite_2025-10:1"
# python = "/local/workspace/hailo_virtualenv/bin/python"
# user   = "hailo"
# (b) the DFC wheel from the Developer Zone, in an image heddle builds (stages/dfc/image/Dockerfile):
# wheel  = "/path/to/hailo_dataflow_compiler-3.33.0-py3-none-linux_x86_64.whl"
# base   = "nvidia/cuda:12.5.1-cudnn-runtime-ubuntu22.04"
# (c) the same wheel in a python env on this host:
# wheel  = "/path/to/hailo_dataflow_compiler-3.33.0-py3-none-linux_x86_64.whl"
# run_on = "host"
"#;

/// `[dfc]` for the flags given; `None` for an example that runs no DFC stage (a `--dfc-*` flag
/// with one is a usage error).
pub fn config(a: &DfcArgs, example: &str) -> Result<Option<Config>, Error> {
    let any = a.dfc_image.is_some() || a.dfc_wheel.is_some();
    if !example.ends_with("-dfc") {
        if any {
            return Err(Error::Usage(format!(
                "--dfc-image / --dfc-wheel set the DFC of a DFC example; `{example}` runs none (try --example compile-onnx-dfc)"
            )));
        }
        return Ok(None);
    }
    let q = |s: &str| toml_string(s);
    if let Some(image) = &a.dfc_image {
        let mut text = format!("{HEADER}[dfc]\nimage = {}\n", q(image));
        if let Some(p) = &a.dfc_python {
            text.push_str(&format!("python = {}\n", q(p)));
        }
        if let Some(u) = &a.dfc_user {
            text.push_str(&format!("user = {}\n", q(u)));
        }
        return Ok(Some(Config {
            text,
            route: format!("route a: the image {image}"),
        }));
    }
    if let Some(wheel) = &a.dfc_wheel {
        let abs = std::path::absolute(wheel).unwrap_or_else(|_| wheel.clone());
        if !abs.is_file() {
            return Err(Error::Usage(format!(
                "--dfc-wheel {}: no such file",
                wheel.display()
            )));
        }
        let path = abs.to_string_lossy();
        let (text, route) = if a.dfc_on_host {
            (
                format!("{HEADER}[dfc]\nwheel = {}\nrun_on = \"host\"\n", q(&path)),
                "route c: the wheel in a host python env",
            )
        } else {
            (
                format!("{HEADER}[dfc]\nwheel = {}\n", q(&path)),
                "route b: an image heddle builds with the wheel",
            )
        };
        return Ok(Some(Config {
            text,
            route: route.into(),
        }));
    }
    Ok(Some(Config {
        text: format!("{HEADER}{CHOICES}"),
        route: "[dfc] to fill in: three routes".into(),
    }))
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}
