//! Healer end-to-end, scenario 9 of issue 5: two healer replicas on one Lease. One
//! leads and writes; the other keeps its caches warm, reports ready and writes nothing.
//! When the leader is SIGKILLed the standby takes over once the lease expires; when a
//! leader is stopped with SIGTERM it releases the lease and the standby takes over at once.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use celld_e2e::*;

async fn leader_of(env: &Env, a: usize, b: usize) -> Result<Option<(usize, usize)>> {
    let la = env.h(a).metric("celld_healer_leader").await.unwrap_or(0.0);
    let lb = env.h(b).metric("celld_healer_leader").await.unwrap_or(0.0);
    Ok(match (la == 1.0, lb == 1.0) {
        (true, false) => Some((a, b)),
        (false, true) => Some((b, a)),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_leader() -> Result<()> {
    let Some(mut env) = Env::start("ha").await? else {
        return Ok(());
    };
    let r = ha(&mut env).await;
    env.finish(r).await
}

async fn ha(env: &mut Env) -> Result<()> {
    let mut f = env.persistent(&env.ns, "alpha", 3);
    env.apply_fleet(&f.yaml()).await?;
    let mut oa = env.healer_options();
    oa.identity = "healer-a".into();
    let mut ob = env.healer_options();
    ob.identity = "healer-b".into();
    let a = env.healer(oa.clone())?;
    let b = env.healer(ob.clone())?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    wait_condition(env, "alpha", "Ready", "True", None, Duration::from_secs(60)).await?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let (leader, standby) = loop {
        if let Some(p) = leader_of(env, a, b).await? {
            break p;
        }
        ensure!(Instant::now() < deadline, "no single leader");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let lid = env.h(leader).identity.clone();
    let sid = env.h(standby).identity.clone();
    let standby_writes = env.h(standby).metric("celld_healer_actions_total").await?;
    let leader_writes = env.h(leader).metric("celld_healer_actions_total").await?;
    ensure!(
        standby_writes == 0.0,
        "the standby wrote {standby_writes} times"
    );
    ensure!(leader_writes > 0.0);
    ensure!(
        env.h(standby).http_status("/readyz").await? == 200,
        "standby not ready"
    );
    ensure!(
        env.h(leader).http_status("/readyz").await? == 200,
        "leader not ready"
    );
    let standby_status_writes = env
        .h(standby)
        .metric("celld_healer_api_requests_total{verb=\"patch\"")
        .await?
        + env
            .h(standby)
            .metric("celld_healer_api_requests_total{verb=\"create\",resource=\"events\"")
            .await?;
    ensure!(
        standby_status_writes == 0.0,
        "the standby patched or created {standby_status_writes} objects"
    );
    eprintln!("[ha] {lid} leads ({leader_writes} writes), {sid} stands by ready with 0 writes");

    // The leader dies without releasing the lease.
    env.h_mut(leader).kill();
    let t0 = Instant::now();
    f.members = 4;
    env.apply_fleet(&f.yaml()).await?;
    wait_for("the standby to lead", Duration::from_secs(30), || async {
        Ok((env
            .h(standby)
            .metric("celld_healer_leader")
            .await
            .unwrap_or(0.0)
            == 1.0)
            .then_some(()))
    })
    .await?;
    let took_over = t0.elapsed();
    wait_ready_members(env, &f.identity, 4, Duration::from_secs(60)).await?;
    let grown = t0.elapsed();
    ensure!(
        env.h(standby)
            .metric("celld_healer_actions_total{kind=\"SetReplicas\"")
            .await?
            >= 1.0
    );
    eprintln!(
        "[ha] {lid} SIGKILLed: {sid} took over after {took_over:?} (lease 6s) and grew the fleet to 4 ({grown:?})"
    );
    ensure!(
        took_over < Duration::from_secs(15),
        "takeover took {took_over:?}"
    );

    // The old leader comes back: it stands by. Then the new leader stops cleanly and hands
    // over at once.
    let mut ob = oa.clone();
    ob.identity = lid.clone();
    let back = env.healer(ob)?;
    wait_for(
        "the restarted replica ready",
        Duration::from_secs(30),
        || async {
            Ok((env.h(back).http_status("/readyz").await.unwrap_or(0) == 200).then_some(()))
        },
    )
    .await?;
    ensure!(
        env.h(back).metric("celld_healer_leader").await? == 0.0,
        "two leaders"
    );
    let t1 = Instant::now();
    let st = env.h_mut(standby).terminate();
    ensure!(
        st.is_some_and(|s| s.success()),
        "SIGTERM exit status {st:?}"
    );
    wait_for(
        "the restarted replica to lead",
        Duration::from_secs(15),
        || async {
            Ok((env
                .h(back)
                .metric("celld_healer_leader")
                .await
                .unwrap_or(0.0)
                == 1.0)
                .then_some(()))
        },
    )
    .await?;
    let handed = t1.elapsed();
    eprintln!(
        "[ha] {sid} stopped with SIGTERM (exit 0, lease released): {lid} leads again after {handed:?}"
    );
    ensure!(
        handed < Duration::from_secs(5),
        "handover after SIGTERM took {handed:?}"
    );
    Ok(())
}
