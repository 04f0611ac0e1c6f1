//! Lock containers against the real Docker Engine (no mocks): a unit is taken by one holder
//! at a time, the other learns who holds it, and release, drop and a stale lock container
//! each free the unit. (A holder killed with SIGKILL is tested through the binary, in
//! tests/docker/engine_units.rs.)
//!
//! Each test uses its own pool name, so tests running in parallel never share a unit.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use heddle_containers::test_images;
use heddle_containers::{unit_container_name, Engine, EngineUnitHolder, HeldUnit, UnitTry};

/// The engine and the busybox image's id, or `None` after the skip notice.
async fn engine() -> Option<(Engine, String)> {
    if !test_images::busybox_available() {
        test_images::skip_notice(std::thread::current().name().unwrap_or("unit-lock-test"));
        return None;
    }
    let engine = Engine::connect(None).await.expect("connect to the engine");
    let image = test_images::ensure_busybox(&engine)
        .await
        .expect("build the busybox test image");
    Some((engine, image.id))
}

macro_rules! engine {
    () => {
        match engine().await {
            Some(e) => e,
            None => return,
        }
    };
}

/// A pool name no other test (or test process) uses.
fn pool() -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "test{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn holder(pool: &str, run: &str) -> EngineUnitHolder {
    EngineUnitHolder {
        pool: pool.to_string(),
        unit: 0,
        pid: Some(std::process::id()),
        hostname: "laptop-2".into(),
        run: run.into(),
        instance: "flash".into(),
        since_unix: Some(1_700_000_000),
    }
}

/// Take the pool's free unit as run "a"; `what` says why it must be free.
async fn take(engine: &Engine, image: &str, pool: &str, what: &str) -> HeldUnit {
    match engine
        .try_take_unit(image, &holder(pool, "a"))
        .await
        .unwrap()
    {
        UnitTry::Taken(held) => held,
        UnitTry::Busy(busy) => panic!("{what}: {busy:?}"),
    }
}

async fn exists(engine: &Engine, pool: &str) -> bool {
    engine
        .unit_locks()
        .await
        .unwrap()
        .iter()
        .any(|l| l.holder.as_ref().is_some_and(|h| h.pool == pool))
}

#[tokio::test]
async fn one_holder_at_a_time_and_the_other_learns_who() {
    let (engine, image) = engine!();
    let pool = pool();
    let held = take(&engine, &image, &pool, "a free unit is taken").await;
    assert_eq!(held.name(), unit_container_name(&pool, 0));
    match engine
        .try_take_unit(&image, &holder(&pool, "b"))
        .await
        .unwrap()
    {
        UnitTry::Busy(busy) => {
            assert!(busy.running);
            assert_eq!(busy.holder, Some(holder(&pool, "a")));
        }
        UnitTry::Taken(_) => panic!("two holders of one unit"),
    }
    let listed = engine.unit_locks().await.unwrap();
    assert!(
        listed
            .iter()
            .any(|l| l.running && l.holder == Some(holder(&pool, "a"))),
        "{listed:?}"
    );
    let with_pool = engine
        .count_labelled(("heddle.unit.pool", pool.as_str()))
        .await
        .unwrap();
    assert_eq!(with_pool, 1);
    held.release().await.unwrap();
    assert!(!exists(&engine, &pool).await, "release removes it at once");
    let again = engine.try_take_unit(&image, &holder(&pool, "b")).await;
    assert!(matches!(again, Ok(UnitTry::Taken(_))), "{again:?}");
}

#[tokio::test]
async fn dropping_a_held_unit_frees_it() {
    let (engine, image) = engine!();
    let pool = pool();
    let held = take(&engine, &image, &pool, "a free unit is taken").await;
    drop(held);
    tokio::time::timeout(Duration::from_secs(20), async {
        while exists(&engine, &pool).await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the lock container is gone after the drop");
}

/// A lock container created and never started (its creator died between create and start)
/// reads as not running; removing it by id frees the unit.
#[tokio::test]
async fn a_lock_container_never_started_is_not_running_and_can_be_removed() {
    let (engine, image) = engine!();
    let pool = pool();
    let name = unit_container_name(&pool, 0);
    let out = std::process::Command::new("docker")
        .args(["create", "--name", &name, "--label"])
        .arg(format!("heddle.unit.pool={pool}"))
        .args(["--label", "heddle.unit.index=0", &image, "cat"])
        .output()
        .expect("docker create");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let UnitTry::Busy(busy) = engine
        .try_take_unit(&image, &holder(&pool, "a"))
        .await
        .unwrap()
    else {
        panic!("the name is taken");
    };
    assert!(!busy.running, "{busy:?}");
    engine.remove_unit(&busy.id).await.unwrap();
    let held = take(
        &engine,
        &image,
        &pool,
        "free after the stale one is removed",
    )
    .await;
    held.release().await.unwrap();
}

/// A unit whose lock container the engine ends while it is held (here removed by hand, as
/// when the holder's connection is dropped) tells its holder.
#[tokio::test]
async fn a_holder_learns_when_its_lock_container_is_ended() {
    let (engine, image) = engine!();
    let pool = pool();
    let mut held = take(&engine, &image, &pool, "a free unit is taken").await;
    let lost = held.lost().expect("a signal");
    let out = std::process::Command::new("docker")
        .args(["rm", "-f", held.name()])
        .output()
        .expect("docker rm");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let told = tokio::time::timeout(Duration::from_secs(10), lost).await;
    assert!(matches!(told, Ok(Ok(()))), "{told:?}");
    held.release().await.unwrap();
}

/// A released unit's signal closes without saying it was lost.
#[tokio::test]
async fn a_released_unit_is_not_lost() {
    let (engine, image) = engine!();
    let pool = pool();
    let mut held = take(&engine, &image, &pool, "a free unit is taken").await;
    let lost = held.lost().expect("a signal");
    held.release().await.unwrap();
    assert!(lost.await.is_err(), "released, not lost");
}
