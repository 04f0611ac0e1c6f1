//! Wall time of taking and releasing one unit of an engine-wide pool, N times: what a placed
//! device stage pays for its lock container (docs/scale-out.md quotes it).
//!
//! ```text
//! cargo run --release -p heddle-containers --example unit_lock -- [N] [DOCKER_HOST]
//! ```
//! Defaults: N = 20, the default engine. Each round is what the scheduler does for a free unit:
//! create + attach + start the lock container, list the stage containers still labelled as
//! holding it (none here), then remove it. Prints every round's take and release times to
//! stderr and `median_take_ms`, `median_release_ms` and `total_ms` to stdout.

use std::time::{Duration, Instant};

use heddle_containers::{test_images, Engine, EngineUnitHolder, UnitTry};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = match args.next() {
        Some(n) => n.parse()?,
        None => 20,
    };
    let engine = Engine::connect(args.next().as_deref()).await?;
    let image = test_images::ensure_busybox(&engine).await?.id;
    let holder = EngineUnitHolder {
        pool: format!("bench{}", std::process::id()),
        unit: 0,
        pid: Some(std::process::id()),
        hostname: "bench".into(),
        run: "bench".into(),
        instance: "bench".into(),
        since_unix: None,
    };
    let (mut takes, mut releases) = (Vec::new(), Vec::new());
    let all = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        let UnitTry::Taken(held) = engine.try_take_unit(&image, &holder).await? else {
            return Err("the bench's own unit is busy".into());
        };
        engine.running_holders_of(held.name()).await?;
        let took = t.elapsed();
        let t = Instant::now();
        held.release().await?;
        let released = t.elapsed();
        eprintln!("{i}: take {took:?}, release {released:?}");
        takes.push(took);
        releases.push(released);
    }
    let total = all.elapsed();
    println!("median_take_ms {:.1}", median_ms(&mut takes));
    println!("median_release_ms {:.1}", median_ms(&mut releases));
    println!("total_ms {:.0}", total.as_secs_f64() * 1e3);
    Ok(())
}

fn median_ms(v: &mut [Duration]) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e3
}
