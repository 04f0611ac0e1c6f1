//! Route (b): the DFC image heddle builds from the recipe it ships
//! (`stages/dfc/image/Dockerfile`, in the stage library inside the binary) and the wheel the user
//! downloaded. The tag is `heddle-dfc:<wheel sha256>-<recipe sha256>` (12 hex digits each; the
//! recipe's hash covers its bytes and the base image asked for), so a new wheel or recipe is a new
//! image, an existing one is used as it is, and the image id, which every DFC stage's key holds,
//! follows the wheel's content.
//!
//! The wheel goes to the engine in the build context (an in-memory tar: a DFC wheel is under a
//! GiB, and the engine reads the context whole anyway).

use std::io::Read;
use std::path::{Path, PathBuf};

use heddle_containers::{ContainerError, Engine, ImageIdentity, PullPolicy};
use heddle_runner::stage_lib;
use sha2::{Digest, Sha256};

/// Where the recipe lives in the stage library.
pub const RECIPE: &str = "dfc/image/Dockerfile";

#[derive(Debug, Clone, PartialEq)]
pub struct Recipe {
    pub wheel: PathBuf,
    /// sha256 of the wheel, hex.
    pub wheel_sha256: String,
    /// `--build-arg BASE`; `None`: the recipe's default.
    pub base: Option<String>,
    /// The interpreter inside, when the user names one (the recipe puts its venv first on PATH).
    pub python: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum RecipeError {
    #[error("the stage library has no {RECIPE} (a heddle built without it)")]
    Missing,
    #[error("failed to read the DFC wheel {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to build the DFC image {tag} from {RECIPE} and {}", wheel.display())]
    Build {
        tag: String,
        wheel: PathBuf,
        #[source]
        source: Box<ContainerError>,
    },
}

impl Recipe {
    pub fn new(
        wheel: PathBuf,
        wheel_sha256: String,
        base: Option<String>,
        python: Option<String>,
    ) -> Recipe {
        Recipe {
            wheel,
            wheel_sha256,
            base,
            python,
        }
    }

    fn recipe_bytes() -> &'static [u8] {
        stage_lib::file(RECIPE).unwrap_or_default()
    }

    /// `heddle-dfc:<wheel>-<recipe>`.
    pub fn tag(&self) -> String {
        let mut h = Sha256::new();
        h.update(b"heddle/dfc-recipe/v1\0");
        h.update(Self::recipe_bytes());
        h.update(b"\0");
        h.update(self.base.as_deref().unwrap_or("").as_bytes());
        let recipe = hex(&h.finalize());
        format!("heddle-dfc:{}-{}", &self.wheel_sha256[..12], &recipe[..12])
    }

    fn wheel_name(&self) -> String {
        self.wheel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "dfc.whl".into())
    }

    /// The image, built first when the engine does not have the tag. `log` says when a build
    /// starts (it takes minutes: the DFC's dependencies are large).
    pub async fn ensure(
        &self,
        engine: &Engine,
        log: &dyn Fn(&str),
    ) -> Result<ImageIdentity, RecipeError> {
        let tag = self.tag();
        let build_err = |source: ContainerError| RecipeError::Build {
            tag: tag.clone(),
            wheel: self.wheel.clone(),
            source: Box::new(source),
        };
        match engine.resolve_image(&tag, PullPolicy::Never).await {
            Ok(id) => return Ok(id),
            Err(ContainerError::ImageMissing { .. }) => {}
            Err(e) => return Err(build_err(e)),
        }
        let recipe = Self::recipe_bytes();
        if recipe.is_empty() {
            return Err(RecipeError::Missing);
        }
        log(&format!(
            "building the DFC image {tag} from {RECIPE} and {} (once per wheel)",
            self.wheel.display()
        ));
        let wheel = std::fs::read(&self.wheel).map_err(|source| RecipeError::Read {
            path: self.wheel.clone(),
            source,
        })?;
        let name = self.wheel_name();
        let context = heddle_containers::test_images::context_tar(&[
            ("Dockerfile", recipe, 0o644),
            (name.as_str(), &wheel, 0o644),
        ]);
        let mut args = vec![("WHEEL", name.as_str())];
        if let Some(b) = &self.base {
            args.push(("BASE", b.as_str()));
        }
        engine
            .build_image_with_args(&tag, context, &args)
            .await
            .map_err(build_err)
    }
}

/// sha256 of a file, hex, streamed.
pub fn file_sha256(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
