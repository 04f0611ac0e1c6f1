//! A [`ContainerSpec`] as the engine's create request: labels (with heddle's own), bind
//! mounts, devices, `--gpus`, limits, and the engine's init as PID 1. A spec the engine would
//! misread (no image, a bad device, a limit out of range) is an error here, before any request.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, DeviceMapping as EngineDevice, DeviceRequest, HostConfig,
    Mount as EngineMount, MountType,
};

use crate::engine::MANAGED_LABEL;
use crate::error::DeviceError;
use crate::error::{ContainerError, SpecError};
use crate::spec::{parse_device, ContainerSpec, GpuRequest};

pub(super) fn create_body(spec: &ContainerSpec) -> Result<ContainerCreateBody, ContainerError> {
    if spec.image.is_empty() {
        return Err(invalid(spec, SpecError::NoImage));
    }
    Ok(ContainerCreateBody {
        image: Some(spec.image.clone()),
        cmd: (!spec.cmd.is_empty()).then(|| spec.cmd.clone()),
        env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        working_dir: spec.workdir.clone(),
        user: spec.user.clone(),
        labels: Some(labels(spec)),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        stop_timeout: i64::try_from(spec.stop_grace.as_secs()).ok(),
        host_config: Some(host_config(spec)?),
        ..Default::default()
    })
}

fn invalid(spec: &ContainerSpec, problem: SpecError) -> ContainerError {
    ContainerError::InvalidSpec {
        image: spec.image.clone(),
        problem,
    }
}

/// The spec's labels and heddle's own, which `remove_labelled` finds leftovers by.
fn labels(spec: &ContainerSpec) -> HashMap<String, String> {
    let mut labels: HashMap<String, String> = spec
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.insert(MANAGED_LABEL.0.to_string(), MANAGED_LABEL.1.to_string());
    labels
}

fn host_config(spec: &ContainerSpec) -> Result<HostConfig, ContainerError> {
    let mounts = mounts(spec);
    let devices = devices(spec).map_err(|e| invalid(spec, e.into()))?;
    let to_i64 = |what: &'static str, bytes: u64| {
        i64::try_from(bytes).map_err(|_| invalid(spec, SpecError::TooLarge { what, bytes }))
    };
    let memory = spec.memory.map(|m| to_i64("memory", m)).transpose()?;
    let shm_size = spec.shm_size.map(|m| to_i64("shm_size", m)).transpose()?;
    let nano_cpus = match spec.cpus {
        Some(c) if !(c.is_finite() && c > 0.0) => {
            return Err(invalid(spec, SpecError::Cpus { cpus: c }))
        }
        Some(c) => Some((c * 1e9).round() as i64),
        None => None,
    };
    Ok(HostConfig {
        mounts: (!mounts.is_empty()).then_some(mounts),
        devices: (!devices.is_empty()).then_some(devices),
        device_requests: device_requests(&spec.gpus),
        network_mode: Some(spec.network.as_engine_str().to_string()),
        memory,
        // Swap equal to the limit means no swap: the limit is a hard one and an over-limit
        // stage is OOM-killed instead of crawling.
        memory_swap: memory,
        shm_size,
        nano_cpus,
        // A tiny init as PID 1 forwards SIGTERM to the command and reaps zombies; without it a
        // `sh -c` script ignores `docker stop` and only dies at SIGKILL after the grace period.
        init: Some(true),
        ..Default::default()
    })
}

fn mounts(spec: &ContainerSpec) -> Vec<EngineMount> {
    spec.mounts
        .iter()
        .map(|m| EngineMount {
            target: Some(m.container.clone()),
            source: Some(m.host.to_string_lossy().into_owned()),
            typ: Some(MountType::BIND),
            read_only: Some(m.read_only),
            ..Default::default()
        })
        .collect()
}

fn devices(spec: &ContainerSpec) -> Result<Vec<EngineDevice>, DeviceError> {
    spec.devices
        .iter()
        .map(|d| {
            parse_device(d).map(|d| EngineDevice {
                path_on_host: Some(d.host),
                path_in_container: Some(d.container),
                cgroup_permissions: Some(d.permissions),
            })
        })
        .collect()
}

/// `docker run --gpus` semantics: no driver (the engine picks the one that offers the "gpu"
/// capability), count -1 for all.
fn device_requests(gpus: &GpuRequest) -> Option<Vec<DeviceRequest>> {
    let gpu_request = |count: Option<i64>, ids: Option<Vec<String>>| DeviceRequest {
        driver: Some(String::new()),
        count,
        device_ids: ids,
        capabilities: Some(vec![vec!["gpu".to_string()]]),
        options: None,
    };
    match gpus {
        GpuRequest::None => None,
        GpuRequest::All => Some(vec![gpu_request(Some(-1), None)]),
        GpuRequest::Count(n) => Some(vec![gpu_request(Some(i64::from(*n)), None)]),
        GpuRequest::Ids(ids) => Some(vec![gpu_request(None, Some(ids.clone()))]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Mount, NetworkMode};

    #[test]
    fn body_carries_limits_labels_and_gpus() {
        let spec = ContainerSpec {
            image: "sha256:abc".into(),
            cmd: vec!["true".into()],
            mounts: vec![Mount {
                host: "/tmp/in".into(),
                container: "/in".into(),
                read_only: true,
            }],
            gpus: GpuRequest::All,
            devices: vec!["/dev/hailo0".into()],
            memory: Some(1 << 20),
            cpus: Some(1.5),
            labels: [("heddle.run".to_string(), "r1".to_string())].into(),
            network: NetworkMode::None,
            ..Default::default()
        };
        let body = create_body(&spec).unwrap();
        let labels = body.labels.unwrap();
        assert_eq!(labels["heddle.managed"], "true");
        assert_eq!(labels["heddle.run"], "r1");
        let hc = body.host_config.unwrap();
        assert_eq!(hc.network_mode.as_deref(), Some("none"));
        assert_eq!(hc.nano_cpus, Some(1_500_000_000));
        assert_eq!(hc.memory_swap, Some(1 << 20));
        let gpu = &hc.device_requests.unwrap()[0];
        assert_eq!(gpu.count, Some(-1));
        assert_eq!(gpu.capabilities, Some(vec![vec!["gpu".to_string()]]));
        assert_eq!(hc.mounts.unwrap()[0].read_only, Some(true));
        assert_eq!(
            hc.devices.unwrap()[0].path_in_container.as_deref(),
            Some("/dev/hailo0")
        );
    }

    #[test]
    fn bad_device_is_an_invalid_spec() {
        let spec = ContainerSpec {
            image: "img".into(),
            devices: vec!["/dev/x:/dev/y:rwx".into()],
            ..Default::default()
        };
        let err = create_body(&spec).unwrap_err();
        assert!(matches!(err, ContainerError::InvalidSpec { .. }), "{err}");
    }
}
