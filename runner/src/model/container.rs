//! The container settings of a stage with an `image` (the Docker executor). Each key follows
//! the stage > definition > `[defaults]` precedence on its own, and `network`, `pull` and
//! `transfer` are parsed into enums here, so a typo is an error at the key that holds it.

use toml::Spanned;

use super::layers::{Layers, Origin};
use super::loader::Loader;
use super::{ByteSize, ContainerOpts, Network, PullPolicy, Transfer};
use crate::spec::{GpuSpec, RawStage};
use crate::template::Template;

impl Loader {
    pub(super) fn container(&mut self, layers: &Layers, sname: &str) -> Option<ContainerOpts> {
        let image = layers.find(|s| s.image.as_ref())?;
        let img = match Template::parse(image.get()) {
            Ok(t) => t,
            Err(e) => {
                let d = image.error(format!("stage `{sname}`: image: {e}"));
                self.errors.push(d);
                return None;
            }
        };
        let gpus = layers.find(|s| s.gpus.as_ref());
        let network = self.network(layers, sname);
        let pull = self.pull(layers, sname);
        let transfer = self.transfer(layers, sname);
        let shm_size = self.size(layers, sname, "shm_size", |s| s.shm_size.as_ref());
        let memory = self.size(layers, sname, "memory", |s| s.memory.as_ref());
        if let Some(g) = &gpus {
            if let GpuSpec::Count(n) = g.get() {
                if *n < 1 {
                    let d = g.error(format!("stage `{sname}`: gpus count must be at least 1"));
                    self.errors.push(d);
                }
            }
        }
        Some(ContainerOpts {
            image: img,
            image_in_def: image.origin == Origin::Definition,
            gpus_in_def: gpus
                .as_ref()
                .is_some_and(|g| g.origin == Origin::Definition),
            gpus: gpus.map(|g| g.get().clone()),
            devices: layers.value(|s| s.devices.as_ref()).unwrap_or_default(),
            network,
            shm_size,
            memory,
            cpus: layers.value(|s| s.cpus.as_ref()),
            user: layers.value(|s| s.user.as_ref()),
            workdir: layers.value(|s| s.workdir.as_ref()),
            pull,
            docker_host: layers.value(|s| s.docker_host.as_ref()),
            transfer,
        })
    }

    fn network(&mut self, layers: &Layers, sname: &str) -> Network {
        let Some(n) = layers.find(|s| s.network.as_ref()) else {
            return Network::None;
        };
        Network::parse(n.get()).unwrap_or_else(|| {
            let d = n.error(format!(
                "stage `{sname}`: network must be \"none\", \"bridge\" or \"host\", not \"{}\"",
                n.get()
            ));
            self.errors.push(d);
            Network::None
        })
    }

    fn pull(&mut self, layers: &Layers, sname: &str) -> PullPolicy {
        let Some(p) = layers.find(|s| s.pull.as_ref()) else {
            return PullPolicy::Never;
        };
        p.get().parse().unwrap_or_else(|_| {
            let d = p.error(format!(
                "stage `{sname}`: pull must be \"never\", \"missing\" or \"always\", not \"{}\"",
                p.get()
            ));
            self.errors.push(d);
            PullPolicy::Never
        })
    }

    fn transfer(&mut self, layers: &Layers, sname: &str) -> Transfer {
        let Some(t) = layers.find(|s| s.transfer.as_ref()) else {
            return Transfer::Auto;
        };
        match t.get().as_str() {
            "auto" => Transfer::Auto,
            "bind" => Transfer::Bind,
            "archive" => Transfer::Archive,
            other => {
                let d = t.error(format!("stage `{sname}`: transfer must be \"auto\", \"bind\" or \"archive\", not \"{other}\""));
                self.errors.push(d);
                Transfer::Auto
            }
        }
    }

    /// `shm_size` / `memory`: parsed once, here, and kept with its text for the key.
    fn size(
        &mut self,
        layers: &Layers,
        sname: &str,
        what: &str,
        get: impl for<'r> Fn(&'r RawStage) -> Option<&'r Spanned<String>>,
    ) -> Option<ByteSize> {
        let v = layers.find(get)?;
        match heddle_containers::parse_size(v.get()) {
            Ok(bytes) => Some(ByteSize {
                text: v.get().clone(),
                bytes,
            }),
            Err(_) => {
                let d = v.error(format!(
                    "stage `{sname}`: {what} `{}` is not a size like \"2g\" or \"512m\"",
                    v.get()
                ));
                self.errors.push(d);
                None
            }
        }
    }
}
