//! What a container stage may touch: inputs are read-only, the network is off by default,
//! outputs belong to the invoking user, symlink outputs reach no host file, devices and limits
//! arrive, and an engine without a shared filesystem gets the same bytes through the archive API.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;

use crate::support::fill;
use crate::support::{instance, Project};
use crate::unprivileged::{Unprivileged, UNPRIVILEGED};
use crate::BUSYBOX;

#[test]
fn an_input_cannot_be_modified_from_inside() {
    let (p, _d, _gc) = busybox_test!(include_str!("fixtures/read_only_inputs.toml"));
    p.run("p.toml", &["--keep-going"]).code(1);
    assert_eq!(
        p.read("out/ro/probe/r.txt"),
        "sh: refused\nrm: refused\nchmod: refused\ntouch: refused\n"
    );
    let rec = p.last_record();
    let force = &instance(&rec, "force")["status"];
    assert_eq!(force["status"], "failed", "{force}");
    assert!(
        force["stderr_tail"]
            .as_str()
            .unwrap_or("")
            .contains("Read-only file system"),
        "{force}"
    );
    assert_eq!(p.read("out/ro/up/t.txt"), "original\n");
    p.assert_cache_clean();
}

#[test]
fn network_none_has_only_loopback() {
    let (p, _d, _gc) = busybox_test!(include_str!("fixtures/network.toml"));
    p.run("p.toml", &[]).ok();
    assert_eq!(p.read("out/net/default/n.txt"), "lo\n");
    let none = p.read("out/net/none/n.txt");
    assert!(none.starts_with("lo\n"), "{none}");
    assert!(none.ends_with("unreachable\n"), "{none}");
    // The contrast that makes the check mean something: a bridged container has an interface.
    assert_ne!(p.read("out/net/bridge/n.txt"), "lo\n");
}

/// Output files belong to whoever runs heddle. As root, the test runs heddle as an
/// unprivileged uid (with the docker socket's group) so the check is not trivially true.
#[test]
fn outputs_belong_to_the_invoking_user() {
    let (p, _d, _gc) = busybox_test!(include_str!("fixtures/ownership.toml"));
    let (uid, gid, r) = match Unprivileged::get() {
        Some(u) => {
            let r = u.heddle(
                &p,
                Some(u.socket_group),
                &["run", "p.toml", "--progress", "plain"],
            );
            (UNPRIVILEGED, UNPRIVILEGED, r)
        }
        None => {
            let m = std::fs::metadata(p.root()).unwrap();
            (m.uid(), m.gid(), p.run("p.toml", &[]))
        }
    };
    r.ok();
    assert_eq!(p.read("out/own/mine/uid.txt"), format!("{uid}\n"));
    assert_eq!(p.read("out/own/mine/gid.txt"), format!("{gid}\n"));
    for f in ["uid.txt", "gid.txt", "d", "d/f"] {
        let m = std::fs::metadata(p.path(&format!("out/own/mine/{f}"))).unwrap();
        assert_eq!((m.uid(), m.gid()), (uid, gid), "owner of {f}");
    }
    // A stage that sets `user` runs as that user (and can still write its outputs).
    assert_eq!(p.read("out/own/theirs/uid.txt"), "1234\n");
    assert_eq!(p.read("out/own/theirs/gid.txt"), "1234\n");
}

#[test]
fn devices_gpus_none_and_shm_reach_the_container() {
    let (p, _d, _gc) = busybox_test!(include_str!("fixtures/devices.toml"));
    p.run("p.toml", &[]).ok();
    assert_eq!(p.read("out/dev/dev/d.txt"), "char\nwritable\n65536\n");
    let rec = p.last_record();
    let executor = &instance(&rec, "dev")["key_parts"]["executor"];
    assert_eq!(
        executor["devices"][0], "/dev/null:/dev/hailo0",
        "{executor}"
    );
    assert_eq!(instance(&rec, "bare")["status"]["status"], "ok");

    // `gpus = "all"` becomes a DeviceRequest with the gpu capability: on a machine without
    // the NVIDIA runtime the engine itself refuses it, and the status says why.
    p.file(
        "gpu.toml",
        &format!(
            "[pipeline]\nname = \"gpu\"\n[stages.g]\nimage = \"{BUSYBOX}\"\ngpus = \"all\"\nrun = [\"true\"]\n"
        ),
    );
    let r = p.run("gpu.toml", &[]);
    if r.code != 0 {
        // The engine cannot give what the stage asks: the environment's fault, not the stage's.
        assert_eq!(r.code, 2, "{}", r.all());
        let rec = p.last_record();
        let status = &instance(&rec, "g")["status"];
        let error = status["error"].as_str().unwrap_or("");
        assert!(error.contains("capabilities: [[gpu]]"), "{status}");
    }
}

/// A container stage (network none) whose output is a symlink to a host folder: the link
/// target means the host's folder once heddle reads the sandbox, so it must not be followed.
#[test]
fn a_container_symlink_output_reaches_no_host_file() {
    let (_d, _gc) = engine!();
    let p = Project::new();
    let secret_dir = p.path("host-private");
    std::fs::create_dir_all(&secret_dir).unwrap();
    std::fs::write(secret_dir.join("key"), "private").unwrap();
    p.file(
        "p.toml",
        &fill(
            include_str!("fixtures/container_symlinks.toml"),
            &[
                ("BUSYBOX", BUSYBOX),
                ("DIR", &secret_dir.display().to_string()),
            ],
        ),
    );
    p.run("p.toml", &["--keep-going"]).code(1);
    let rec = p.last_record();
    for label in ["file", "folder", "inside"] {
        let s = &instance(&rec, label)["status"];
        assert_eq!(s["error_class"], "UnsafeOutput", "{label}: {s}");
    }
    assert!(!p.path("out/clink/folder/d").exists());
    assert!(!p.path("out/clink/file/o.txt").exists());
    assert_eq!(
        std::fs::read_to_string(secret_dir.join("key")).unwrap(),
        "private"
    );
    p.assert_cache_clean();
}

/// A container stage on an engine without a shared filesystem: inputs go in and outputs come
/// back through the archive API, the container has no bind mount, and the outputs are byte for
/// byte those of the bind-mount run.
#[test]
fn archive_transfer_runs_without_bind_mounts_and_matches_bind() {
    let (_d, _gc) = engine!();
    let tcp = crate::support::docker::engine_over_tcp();
    let pipeline = |transfer: &str, host: &str| {
        fill(
            include_str!("fixtures/transfer.toml"),
            &[("BUSYBOX", BUSYBOX), ("HOST", host), ("TRANSFER", transfer)],
        )
    };
    let p = Project::new();
    p.file("p.toml", &pipeline("bind", "unix:///var/run/docker.sock"));
    p.run("p.toml", &[]).ok();
    let bind_copy = std::fs::read(p.path("out/xfer/use/copy.bin")).unwrap();
    assert_ne!(p.read("out/xfer/use/mounts.txt").trim(), "0");

    p.file("p.toml", &pipeline("archive", &tcp));
    p.run("p.toml", &["--force", "use"]).ok();
    assert_eq!(
        p.read("out/xfer/use/mounts.txt").trim(),
        "0",
        "no bind mount"
    );
    assert_eq!(
        std::fs::read(p.path("out/xfer/use/copy.bin")).unwrap(),
        bind_copy
    );
    assert_eq!(p.read("out/xfer/use/dir/g"), "hi\n");
    // `auto` picks the archive for a tcp:// engine.
    p.file("p.toml", &pipeline("auto", &tcp));
    p.run("p.toml", &["--force", "use"]).ok();
    assert_eq!(p.read("out/xfer/use/mounts.txt").trim(), "0");
}

/// Two configured hosts, the local engine over its unix socket (`near`, pool `gpu`) and the
/// same engine over TCP (`far`, pool `hailo`): each stage lands on the host whose pools offer
/// its resource (container labels and the run record agree), the TCP host gets its sandbox
/// through the archive API, a stage without resources stays on the default engine, `heddle
/// plan` says where each would go, and every copy of the input comes back byte for byte.
#[test]
fn stages_land_on_the_host_whose_pools_offer_their_resources() {
    let (_d, _gc) = engine!();
    let tcp = crate::support::docker::engine_over_tcp();
    let p = Project::with_hosts(&format!(
        "[hosts.near]\ndocker = \"unix:///var/run/docker.sock\"\npools = {{ gpu = 1 }}\n\n\
             [hosts.far]\ndocker = \"{tcp}\"\npools = {{ hailo = 1 }}\n"
    ));
    let stage = |name: &str, resources: &str| {
        format!(
            r#"
[stages.{name}]
image = "{BUSYBOX}"
{resources}
inputs = {{ blob = "make.blob" }}
run = "(grep -c ' /heddle/' /proc/mounts || true) > {{{{ out.mounts }}}}; cat {{{{ in.blob }}}} > {{{{ out.copy }}}}"
outputs = {{ mounts = "mounts.txt", copy = "copy.bin" }}
"#
        )
    };
    p.file(
        "p.toml",
        &format!(
            r#"
[pipeline]
name = "placed"
[resources]
gpu = 1
hailo = 1
[stages.make]
run = "head -c 200000 /dev/urandom > {{{{ out.blob }}}}"
outputs = {{ blob = "blob.bin" }}
{}{}{}"#,
            stage("train", "resources = { gpu = 1 }"),
            stage("flash", "resources = { hailo = 1 }"),
            stage("plain", ""),
        ),
    );
    let plan = p.heddle(&["plan", "p.toml"]).ok();
    let line = |label: &str| plan.plan_line(label).to_string();
    assert!(line("train").ends_with("(on near)"), "{}", plan.stdout);
    assert!(line("flash").ends_with("(on far)"), "{}", plan.stdout);
    assert!(!line("plain").contains("(on "), "{}", plan.stdout);

    let creates = crate::events::Creates::watch();
    p.run("p.toml", &[]).ok();
    let record = p.last_record();
    let run = crate::support::records::run_id(&record);
    let labels: BTreeMap<String, BTreeMap<String, String>> = creates
        .finish()
        .into_iter()
        .filter(|a| a.get("heddle.run") == Some(&run))
        .map(|a| (a["heddle.instance"].clone(), a))
        .collect();
    assert_eq!(labels.len(), 3, "{labels:#?}");
    let placed = |i: &str| labels[i].get("heddle.placed-on").map(String::as_str);
    assert_eq!(placed("train"), Some("near"));
    assert_eq!(placed("flash"), Some("far"));
    assert_eq!(placed("plain"), None);
    assert_eq!(labels["flash"]["heddle.engine"], tcp);
    assert_eq!(labels["flash"]["heddle.transfer"], "archive");
    assert_eq!(labels["train"]["heddle.transfer"], "bind");
    assert_eq!(instance(&record, "train")["host"], "near");
    assert_eq!(instance(&record, "flash")["host"], "far");
    assert!(instance(&record, "plain").get("host").is_none());

    assert_eq!(
        p.read("out/placed/flash/mounts.txt").trim(),
        "0",
        "no bind mount"
    );
    assert_ne!(p.read("out/placed/train/mounts.txt").trim(), "0");
    let blob = std::fs::read(p.path("out/placed/make/blob.bin")).unwrap();
    for stage in ["train", "flash", "plain"] {
        let copy = std::fs::read(p.path(&format!("out/placed/{stage}/copy.bin"))).unwrap();
        assert!(copy == blob, "{stage}: the copy differs from the input");
    }
}

/// `--jobs 1` bounds what runs here, not what runs on a configured host: a stage placed on the
/// TCP host runs while a host stage holds the one local slot (their intervals, read from
/// `/proc/uptime` inside each, overlap).
#[test]
fn a_placed_stage_takes_no_local_job_slot() {
    let (_d, _gc) = engine!();
    let tcp = crate::support::docker::engine_over_tcp();
    let p = Project::with_hosts(&format!(
        "[hosts.far]\ndocker = \"{tcp}\"\npools = {{ hailo = 1 }}\n"
    ));
    let interval = "cut -d' ' -f1 /proc/uptime > {{ out.start }}; sleep 3; cut -d' ' -f1 /proc/uptime > {{ out.end }}";
    p.file(
        "p.toml",
        &format!(
            r#"
[pipeline]
name = "slots"
[resources]
hailo = 1
[stages.here]
run = "{interval}"
outputs = {{ start = "start", end = "end" }}
[stages.far]
image = "{BUSYBOX}"
resources = {{ hailo = 1 }}
run = "{interval}"
outputs = {{ start = "start", end = "end" }}
"#
        ),
    );
    p.run("p.toml", &["--jobs", "1"]).ok();
    let at = |stage: &str, edge: &str| -> f64 {
        p.read(&format!("out/slots/{stage}/{edge}"))
            .trim()
            .parse()
            .unwrap()
    };
    let (here, far) = (
        (at("here", "start"), at("here", "end")),
        (at("far", "start"), at("far", "end")),
    );
    assert!(
        here.0 < far.1 && far.0 < here.1,
        "ran one after the other: here {here:?}, far {far:?}"
    );
}
