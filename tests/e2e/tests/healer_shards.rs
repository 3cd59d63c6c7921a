//! Sharded healers (`--shard i/n`, `celld-gen install --shards n`), on the real control
//! plane:
//!
//! - two shards (one with a standby) split the fleets with no overlap and no gap: every
//!   fleet grows, and every Event about a fleet comes from a healer of the shard its
//!   identity hashes to;
//! - SIGKILLing shard 0's leader stops healing only for shard 0's fleets: a shard-1 fleet
//!   raised meanwhile grows at once, the shard-0 fleet waits until the standby's lease
//!   takeover, then grows by the standby;
//! - changing the count from 2 to 3 while the old shards run: the new healers hold their
//!   shard leases but do not act (the shared lease `<lease>-shards` is still renewed by
//!   the count of 2); once the old ones stop, the new ones take over, and no Event of a
//!   count-3 healer is older than the last Event of a count-2 healer.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use celld_e2e::*;
use celld_gen::api::healer_flags::Shard;
use k8s_openapi::api::events::v1::Event as KEvent;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::ListParams;

/// Lease duration of every healer here: long enough that the leader-kill check sees
/// shard 1 act well before shard 0's standby may take over.
const LEASE: &str = "9s";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_split_fleets_and_hand_over_safely() -> Result<()> {
    let Some(mut env) = Env::start("shards").await? else {
        return Ok(());
    };
    let r = scenario(&mut env).await;
    env.finish(r).await
}

/// Who sent each Event about a fleet, with its time: (fleet, reporting instance, time).
async fn actors(env: &Env) -> Result<Vec<(String, String, Timestamp)>> {
    let api: Api<KEvent> = Api::namespaced(env.client.clone(), &env.ns);
    Ok(api
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter_map(|e| {
            let r = e.regarding.as_ref()?;
            (r.kind.as_deref() == Some("CelldFleet")).then(|| {
                (
                    r.name.clone().unwrap_or_default(),
                    e.reporting_instance.clone().unwrap_or_default(),
                    e.event_time
                        .as_ref()
                        .map(|t| t.0)
                        .unwrap_or(Timestamp::UNIX_EPOCH),
                )
            })
        })
        .collect())
}

fn shard_healer(env: &Env, identity: &str, shard: &str) -> HealerOptions {
    let mut o = env.healer_options();
    o.identity = identity.into();
    o.lease_duration = LEASE.into();
    o.extra = vec!["--shard".into(), shard.into()];
    o
}

async fn wait_replicas(env: &Env, name: &str, n: i32, timeout: Duration) -> Result<()> {
    wait_for(&format!("{name} at {n} replicas"), timeout, || async move {
        Ok((replicas(env, name).await? == Some(n)).then_some(()))
    })
    .await
}

async fn leading(env: &Env, i: usize) -> bool {
    env.h(i).metric("celld_healer_leader").await.unwrap_or(0.0) == 1.0
}

/// Every Event about a fleet came from a healer that serves it under `count`.
fn check_owners(
    events: &[(String, String, Timestamp)],
    fleets: &BTreeMap<String, String>,
    healers: &BTreeMap<String, Shard>,
) -> Result<()> {
    for (fleet, who, _) in events {
        let Some(shard) = healers.get(who) else {
            continue;
        };
        let identity = fleets
            .get(fleet)
            .context("an Event about an unknown fleet")?;
        ensure!(
            shard.owns(identity),
            "{who} (shard {shard}) acted on {fleet}, whose identity hashes to shard {}",
            Shard::of(identity, shard.count)
        );
    }
    Ok(())
}

async fn scenario(env: &mut Env) -> Result<()> {
    // Six Bucket fleets, at least two on each of the two shards.
    let files: Vec<FleetFile> = loop {
        let f: Vec<FleetFile> = (0..6)
            .map(|i| env.bucket(&env.ns, &format!("f{i}"), 3).protection(false))
            .collect();
        let on0 = f.iter().filter(|f| Shard::of(&f.identity, 2) == 0).count();
        if (2..=4).contains(&on0) {
            break f;
        }
    };
    let fleets: BTreeMap<String, String> = files
        .iter()
        .map(|f| (f.name.clone(), f.identity.clone()))
        .collect();
    for f in &files {
        env.apply_fleet(&f.yaml()).await?;
    }
    let s0a = env.healer(shard_healer(env, "s0-a", "0/2"))?;
    let s0b = env.healer(shard_healer(env, "s0-b", "0/2"))?;
    let s1 = env.healer(shard_healer(env, "s1-a", "1/2"))?;
    let mut two: BTreeMap<String, Shard> = BTreeMap::new();
    for (id, index) in [("s0-a", 0), ("s0-b", 0), ("s1-a", 1)] {
        two.insert(id.into(), Shard { index, count: 2 });
    }
    for f in &files {
        wait_replicas(env, &f.name, 3, Duration::from_secs(60)).await?;
    }
    let events = actors(env).await?;
    check_owners(&events, &fleets, &two)?;
    let acted: BTreeSet<&String> = events.iter().map(|(f, _, _)| f).collect();
    ensure!(
        acted.len() == files.len(),
        "every fleet has Events from its shard: {acted:?}"
    );
    eprintln!(
        "two shards: {} fleets grown, {} Events, each from the fleet's own shard",
        files.len(),
        events.len()
    );

    // Kill shard 0's leader: shard 1 goes on, shard 0 waits for its standby.
    let (leader, standby) = match (leading(env, s0a).await, leading(env, s0b).await) {
        (true, false) => (s0a, s0b),
        (false, true) => (s0b, s0a),
        other => anyhow::bail!("shard 0 should have one leader, got {other:?}"),
    };
    ensure!(leading(env, s1).await, "shard 1 leads");
    let f0 = files
        .iter()
        .find(|f| Shard::of(&f.identity, 2) == 0)
        .context("a shard-0 fleet")?;
    let f1 = files
        .iter()
        .find(|f| Shard::of(&f.identity, 2) == 1)
        .context("a shard-1 fleet")?;
    env.h_mut(leader).kill();
    let killed = Instant::now();
    for f in [f0, f1] {
        let mut up = f.clone();
        up.members = 4;
        env.apply_fleet(&up.yaml()).await?;
    }
    wait_replicas(env, &f1.name, 4, Duration::from_secs(20)).await?;
    let shard1_after = killed.elapsed();
    ensure!(
        replicas(env, &f0.name).await? == Some(3) && !leading(env, standby).await,
        "shard 0's fleet grew before its standby took over ({shard1_after:?} after the kill)"
    );
    wait_replicas(env, &f0.name, 4, Duration::from_secs(40)).await?;
    let shard0_after = killed.elapsed();
    let sid = env.h(standby).identity.clone();
    ensure!(
        actors(env)
            .await?
            .iter()
            .any(|(f, who, _)| f == &f0.name && who == &sid),
        "the standby {sid} acted on {}",
        f0.name
    );
    eprintln!(
        "leader of shard 0 killed: shard 1's fleet grew {shard1_after:?} after, shard 0's \
         waited for the standby's takeover and grew {shard0_after:?} after"
    );

    // Count 2 -> 3 while the count of 2 runs: the new healers must wait.
    let mut three: BTreeMap<String, Shard> = BTreeMap::new();
    let mut new = Vec::new();
    for index in 0..3u32 {
        let id = format!("t{index}");
        new.push(env.healer(shard_healer(env, &id, &format!("{index}/3")))?);
        three.insert(id, Shard { index, count: 3 });
    }
    let all_at = |n: i32| {
        files.iter().map(move |f| {
            let mut g = f.clone();
            g.members = n;
            g
        })
    };
    for f in all_at(5) {
        env.apply_fleet(&f.yaml()).await?;
    }
    for f in &files {
        wait_replicas(env, &f.name, 5, Duration::from_secs(60)).await?;
    }
    for &i in &new {
        ensure!(
            !leading(env, i).await,
            "{} acts beside the count of 2",
            env.h(i).identity
        );
        env.h(i)
            .wait_log("another shard count", Duration::from_secs(10))
            .await?;
    }
    let events = actors(env).await?;
    ensure!(
        !events.iter().any(|(_, who, _)| three.contains_key(who)),
        "a count-3 healer acted while the count of 2 ran"
    );
    check_owners(&events, &fleets, &two)?;
    // The count of 2 stops (as when Argo CD prunes its Deployments).
    for i in [standby, s1] {
        env.h_mut(i).terminate();
    }
    let stopped = Instant::now();
    for f in all_at(6) {
        env.apply_fleet(&f.yaml()).await?;
    }
    for f in &files {
        wait_replicas(env, &f.name, 6, Duration::from_secs(60)).await?;
    }
    let takeover = stopped.elapsed();
    let events = actors(env).await?;
    check_owners(&events, &fleets, &three)?;
    let last_two = events
        .iter()
        .filter(|(_, who, _)| two.contains_key(who))
        .map(|(_, _, t)| *t)
        .max()
        .context("Events of the count of 2")?;
    let first_three = events
        .iter()
        .filter(|(_, who, _)| three.contains_key(who))
        .map(|(_, _, t)| *t)
        .min()
        .context("Events of the count of 3")?;
    ensure!(
        first_three > last_two,
        "the counts overlapped: first count-3 Event {first_three}, last count-2 Event {last_two}"
    );
    for &i in &new {
        ensure!(
            leading(env, i).await,
            "{} leads its shard of 3",
            env.h(i).identity
        );
    }
    eprintln!(
        "count 2 -> 3: the new healers waited while the old ones ran, took over and grew \
         every fleet {takeover:?} after the old ones stopped; first count-3 Event \
         {first_three} after the last count-2 Event {last_two}"
    );
    Ok(())
}
