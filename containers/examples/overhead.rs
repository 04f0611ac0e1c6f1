//! Wall time of `Engine::run` for one image and command, to compare with `docker run --rm`.
//!
//! ```text
//! cargo run --release -p heddle-containers --example overhead -- [N] [IMAGE] [CMD...]
//! ```
//! Defaults: N = 20, IMAGE = heddle-test/busybox:latest (built if missing), CMD = `true`.
//! heddle's default network is `none`; set `OVERHEAD_NETWORK=bridge` to match a plain
//! `docker run --rm` (which also runs without an init, while heddle always uses one).
//! Prints every run's time to stderr and `median_ms <value>` to stdout.

use std::time::{Duration, Instant};

use heddle_containers::test_images::{self, BUSYBOX};
use heddle_containers::{ContainerOutcome, ContainerSpec, Engine, NetworkMode, PullPolicy};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = match args.next() {
        Some(n) => n.parse()?,
        None => 20,
    };
    let image = args.next().unwrap_or_else(|| BUSYBOX.to_string());
    let mut cmd: Vec<String> = args.collect();
    if cmd.is_empty() {
        cmd.push("true".to_string());
    }

    let network = match std::env::var("OVERHEAD_NETWORK").as_deref() {
        Err(_) | Ok("none") => NetworkMode::None,
        Ok("bridge") => NetworkMode::Bridge,
        Ok("host") => NetworkMode::Host,
        Ok(other) => {
            return Err(format!("OVERHEAD_NETWORK={other:?}: expected none, bridge or host").into())
        }
    };
    let engine = Engine::connect(None).await?;
    let identity = if image == BUSYBOX {
        test_images::ensure_busybox(&engine).await?
    } else {
        engine.resolve_image(&image, PullPolicy::Never).await?
    };
    let dir = tempfile::tempdir()?;
    let spec = ContainerSpec {
        image: identity.id,
        cmd,
        labels: [("heddle.bench".to_string(), "overhead".to_string())].into(),
        stdout_log: dir.path().join("stdout.log"),
        stderr_log: dir.path().join("stderr.log"),
        network,
        ..Default::default()
    };

    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let start = Instant::now();
        let outcome = engine.run(&spec, None, CancellationToken::new()).await?;
        let elapsed = start.elapsed();
        if outcome != (ContainerOutcome::Exited { code: 0 }) {
            return Err(format!("run {i} ended with {outcome:?}").into());
        }
        eprintln!("run {i}: {:.1} ms", ms(elapsed));
        times.push(elapsed);
    }
    times.sort();
    let median = if n % 2 == 1 {
        times[n / 2]
    } else {
        (times[n / 2 - 1] + times[n / 2]) / 2
    };
    println!("median_ms {:.1}", ms(median));
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
