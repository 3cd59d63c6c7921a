//! Healer end-to-end, scenarios 4 and 8 of issue 5.
//!
//! 4. A volume is deleted: the claim goes Lost, the member gets a fresh disk through the
//!    handoff; every other claim keeps its uid.
//! 8. The healer is killed with SIGKILL at each step of a handoff, then restarted: a
//!    prepared handoff (before or after its guarded Pod delete) is aborted and keeps the
//!    disk; a committed one (before or after its claim delete) finishes; nothing else is
//!    deleted.
//!
//! Rule R8: two volumes lost at once hold every disk until the loss is accepted by uid.
//! Rule H6: a second member down between a handoff's commit and its last step keeps the
//! disk.
//! Rule R9: a member recovering its predecessor's log for several replacement delays
//! keeps its disk; once it answers nothing of the kind for a whole delay, it is down.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use celld_e2e::*;
use celld_healer::plan::HandoffRecord;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use serde_json::json;

const FINALIZER: &str = "fleet.celld.dev/replacing-disk";
const RECORD: &str = "fleet.celld.dev/replacement-claim";
const INDEX: &str = "fleet.celld.dev/replacement-fleet";
/// The handoff test's `--fresh-disk-age`.
const FRESH_DISK_AGE: Duration = Duration::from_secs(3);
/// The tests' `--absorb-window` ([`Env::healer_options`]).
const ABSORB_WINDOW: Duration = Duration::from_secs(10);

fn uids(c: &BTreeMap<String, (String, String, bool)>) -> BTreeMap<String, String> {
    c.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect()
}

fn record(p: &Pod) -> Option<HandoffRecord> {
    p.metadata
        .annotations
        .as_ref()?
        .get(RECORD)
        .and_then(|v| HandoffRecord::parse(v).ok())
}

fn held(p: &Pod) -> bool {
    p.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == FINALIZER))
}

fn markers(p: &Pod) -> bool {
    held(p)
        || p.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(RECORD))
        || p.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(INDEX))
}

/// Waits until claim `name` has a uid other than `old`, is Bound, and member `pod` is
/// ready without handoff markers.
async fn wait_fresh_disk(env: &Env, name: &str, old: &str, pod: &str) -> Result<()> {
    let pods: Api<Pod> = env.api();
    wait_for(
        &format!("{name} replaced and {pod} ready"),
        Duration::from_secs(120),
        || {
            let pods = pods.clone();
            async move {
                let c = claims(env).await?;
                let fresh = c
                    .get(name)
                    .is_some_and(|(uid, phase, del)| uid != old && phase == "Bound" && !del);
                let ready = pods.get_opt(pod).await?.is_some_and(|p| {
                    pod_ready(&p) && !markers(&p) && p.metadata.deletion_timestamp.is_none()
                });
                Ok((fresh && ready).then_some(()))
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_volume_gets_a_fresh_disk() -> Result<()> {
    let Some(mut env) = Env::start("lost-volume").await? else {
        return Ok(());
    };
    let r = lost_volume(&mut env).await;
    env.finish(r).await
}

async fn lost_volume(env: &mut Env) -> Result<()> {
    let f = env.persistent(&env.ns, "alpha", 3);
    env.apply_fleet(&f.yaml()).await?;
    env.healer(env.healer_options())?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    wait_condition(env, "alpha", "Ready", "True", None, Duration::from_secs(60)).await?;
    let before = claims(env).await?;
    let t0 = std::time::Instant::now();
    let gone = env
        .sim
        .control
        .delete_claim_volume(&env.ns, "data-alpha-1")
        .await?;
    eprintln!("[lost-volume] deleted {} (data-alpha-1)", gone.pv);
    let ev = wait_event(env, "alpha", "MemberDiskLost", Duration::from_secs(60)).await?;
    eprintln!(
        "[lost-volume] {:?} after the volume went: {ev}",
        t0.elapsed()
    );
    wait_fresh_disk(env, "data-alpha-1", &before["data-alpha-1"].0, "alpha-1").await?;
    eprintln!(
        "[lost-volume] alpha-1 ready on a fresh disk {:?} after the volume went",
        t0.elapsed()
    );
    let after = claims(env).await?;
    for n in ["data-alpha-0", "data-alpha-2"] {
        ensure!(before[n].0 == after[n].0, "{n} changed uid");
    }
    let evs = fleet_events(&env.client, &env.ns, Some("alpha")).await?;
    let actions: Vec<String> = evs
        .iter()
        .filter(|e| e.action != "Report")
        .map(|e| format!("{}:{}", e.action, e.reason))
        .collect();
    eprintln!("[lost-volume] healer writes: {actions:?}");
    for want in ["StartHandoff", "DeleteClaim", "ReleaseHandoff"] {
        ensure!(
            evs.iter().any(|e| e.action == want),
            "no {want} in {actions:?}"
        );
    }
    wait_condition(env, "alpha", "Ready", "True", None, Duration::from_secs(60)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_lost_volumes_hold_until_the_loss_is_accepted() -> Result<()> {
    let Some(mut env) = Env::start("two-lost").await? else {
        return Ok(());
    };
    let r = two_lost(&mut env).await;
    env.finish(r).await
}

/// Rule R8: two claims Lost at once are an incident; nothing is replaced (however long
/// past the confirmation window) until an operator accepts those exact claims by uid.
async fn two_lost(env: &mut Env) -> Result<()> {
    let f = env.persistent(&env.ns, "alpha", 3);
    env.apply_fleet(&f.yaml()).await?;
    env.healer(env.healer_options())?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    wait_condition(env, "alpha", "Ready", "True", None, Duration::from_secs(60)).await?;
    let before = claims(env).await?;
    for c in ["data-alpha-1", "data-alpha-2"] {
        env.sim.control.delete_claim_volume(&env.ns, c).await?;
    }
    let (_, _, msg) = wait_condition(
        env,
        "alpha",
        "Blocked",
        "True",
        Some("DisksLost"),
        Duration::from_secs(60),
    )
    .await?;
    eprintln!("[two-lost] {msg}");
    let (u1, u2) = (&before["data-alpha-1"].0, &before["data-alpha-2"].0);
    ensure!(
        msg.contains(u1.as_str()) && msg.contains(u2.as_str()),
        "DisksLost does not name both claims: {msg}"
    );
    // Well past the confirmation window (10 s in the tests): no handoff started, every
    // claim still the one it was.
    holds_for(
        "no disk replaced while two are Lost",
        Duration::from_secs(25),
        || async {
            let now = claims(env).await?;
            let evs = fleet_events(&env.client, &env.ns, Some("alpha")).await?;
            Ok(uids(&now) == uids(&before) && !evs.iter().any(|e| e.action == "StartHandoff"))
        },
    )
    .await?;
    // Accepting one of them is not enough.
    let fleets: Api<celld_gen::api::CelldFleet> = env.api();
    let annotate = |v: String| {
        let fleets = fleets.clone();
        async move {
            fleets
                .patch(
                    "alpha",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"metadata": {"annotations": {
                        "fleet.celld.dev/accept-disk-loss": v
                    }}})),
                )
                .await
        }
    };
    annotate(u1.clone()).await?;
    holds_for(
        "no disk replaced with one of two accepted",
        Duration::from_secs(5),
        || async { Ok(uids(&claims(env).await?) == uids(&before)) },
    )
    .await?;
    annotate(format!("{u1},{u2}")).await?;
    wait_fresh_disk(env, "data-alpha-1", u1, "alpha-1").await?;
    wait_fresh_disk(env, "data-alpha-2", u2, "alpha-2").await?;
    let after = claims(env).await?;
    ensure!(
        before["data-alpha-0"].0 == after["data-alpha-0"].0,
        "data-alpha-0 changed uid"
    );
    wait_condition(env, "alpha", "Ready", "True", None, Duration::from_secs(60)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_member_down_before_the_last_step_keeps_the_disk() -> Result<()> {
    let Some(mut env) = Env::start("second-down").await? else {
        return Ok(());
    };
    let r = second_down(&mut env).await;
    env.finish(r).await
}

/// Rule H6: a handoff committed for a member down too long, then a second member's node
/// stops before the claim is deleted (the healer is killed right after the commit). The
/// healer that comes next finds the fleet with two members down: it aborts, keeping the
/// disk, and the member returns on it.
async fn second_down(env: &mut Env) -> Result<()> {
    let pods: Api<Pod> = env.api();
    let f = env.persistent(&env.ns, "sd", 3);
    env.apply_fleet(&f.yaml()).await?;
    let h = normal_healer(env)?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    wait_disks_older_than_new_pods(env, &["data-sd-1"], FRESH_DISK_AGE).await?;
    let first = pods.get("sd-1").await?.metadata.uid.clone();
    pods.delete("sd-1", &Default::default()).await?;
    wait_for("sd-1 recreated", Duration::from_secs(60), || {
        let pods = pods.clone();
        let first = first.clone();
        async move {
            Ok(pods
                .get_opt("sd-1")
                .await?
                .filter(|x| x.metadata.uid != first && pod_ready(x))
                .map(|_| ()))
        }
    })
    .await?;
    env.h_mut(h).terminate();
    let before = claims(env).await?;
    wait_ready_for(
        env,
        &["sd-0", "sd-2"],
        ABSORB_WINDOW,
        Duration::from_secs(60),
    )
    .await?;
    let p1 = pods.get("sd-1").await?;
    run_until_halt(env, "commit", async {
        set_stub_mode(&p1, json!({"health": "unhealthy"})).await
    })
    .await?;
    let p = pods.get("sd-1").await?;
    ensure!(
        record(&p).is_some_and(|r| r.committed) && held(&p),
        "after commit: {:?}",
        p.metadata
    );
    // A second member goes down before the last step.
    let node = node_of(&pods.get("sd-2").await?);
    env.sim.control.stop_node(&node).await?;
    wait_for("sd-2 not ready", Duration::from_secs(90), || {
        let pods = pods.clone();
        async move {
            Ok(pods
                .get_opt("sd-2")
                .await?
                .filter(|p| !pod_ready(p))
                .map(|_| ()))
        }
    })
    .await?;
    normal_healer(env)?;
    let abort = wait_for(
        "the handoff aborted (rule H6)",
        Duration::from_secs(60),
        || async {
            let evs = fleet_events(&env.client, &env.ns, Some("sd")).await?;
            Ok(evs.into_iter().find(|e| e.action == "AbortHandoff"))
        },
    )
    .await?;
    eprintln!("[second-down] {}", abort.note);
    ensure!(
        abort.note.contains("sd-2"),
        "the abort does not name sd-2: {}",
        abort.note
    );
    wait_for("sd-1 back on its own disk", Duration::from_secs(90), || {
        let pods = pods.clone();
        async move {
            Ok(pods
                .get_opt("sd-1")
                .await?
                .filter(|p| pod_ready(p) && !markers(p) && p.metadata.deletion_timestamp.is_none())
                .map(|_| ()))
        }
    })
    .await?;
    let after = claims(env).await?;
    ensure!(
        before["data-sd-1"].0 == after["data-sd-1"].0,
        "data-sd-1 was replaced with two members down"
    );
    env.sim.control.start_node(&node).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_recovering_its_predecessor_keeps_its_disk() -> Result<()> {
    let Some(mut env) = Env::start("recovering").await? else {
        return Ok(());
    };
    let r = recovering(&mut env).await;
    env.finish(r).await
}

/// The tests' `--member-replacement-delay` ([`Env::healer_options`]).
const REPLACEMENT_DELAY: Duration = Duration::from_secs(20);

/// Rule R9: member rc-1, on a disk older than its Pod and so due for a fresh one by
/// rule R3 after the replacement delay, answers "predecessor recovery in progress" (the
/// stub, like celld recovering at start) for three delays: its Pod and disk stay, and
/// its state is `Recovering`. Then it stops saying so (503 without it): a delay later it
/// gets a fresh disk.
async fn recovering(env: &mut Env) -> Result<()> {
    let pods: Api<Pod> = env.api();
    let fleets: Api<celld_gen::api::CelldFleet> = env.api();
    let f = env.persistent(&env.ns, "rc", 3);
    env.apply_fleet(&f.yaml()).await?;
    normal_healer(env)?;
    wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    wait_disks_older_than_new_pods(env, &["data-rc-1"], FRESH_DISK_AGE).await?;
    let env: &Env = env;
    let first = pods.get("rc-1").await?.metadata.uid.clone();
    pods.delete("rc-1", &Default::default()).await?;
    wait_for("rc-1 recreated", Duration::from_secs(60), || {
        let pods = pods.clone();
        let first = first.clone();
        async move {
            Ok(pods
                .get_opt("rc-1")
                .await?
                .filter(|x| x.metadata.uid != first && pod_ready(x))
                .map(|_| ()))
        }
    })
    .await?;
    wait_ready_for(
        env,
        &["rc-0", "rc-1", "rc-2"],
        ABSORB_WINDOW,
        Duration::from_secs(60),
    )
    .await?;
    let p1 = pods.get("rc-1").await?;
    let pod_uid = p1.metadata.uid.clone().unwrap_or_default();
    let disk = claims(env).await?["data-rc-1"].0.clone();
    set_stub_mode(&p1, json!({"recovering": true})).await?;
    wait_for("rc-1 reported Recovering", Duration::from_secs(60), || {
        let fleets = fleets.clone();
        async move {
            let states = fleets
                .get("rc")
                .await?
                .status
                .map(|s| s.member_states)
                .unwrap_or_default();
            Ok(states
                .iter()
                .any(|m| m.name == "rc-1" && m.state == "Recovering")
                .then_some(()))
        }
    })
    .await?;
    eprintln!("[recovering] rc-1 is down and says it recovers; watching it keep its disk");
    holds_for(
        "rc-1 and its disk kept while it recovers",
        3 * REPLACEMENT_DELAY,
        || {
            let pods = pods.clone();
            let pod_uid = pod_uid.clone();
            let disk = disk.clone();
            async move {
                let p = pods.get_opt("rc-1").await?;
                let c = claims(env).await?;
                Ok(p.is_some_and(|p| {
                    p.metadata.uid.as_deref() == Some(pod_uid.as_str())
                        && p.metadata.deletion_timestamp.is_none()
                        && !markers(&p)
                        && !pod_ready(&p)
                }) && c
                    .get("data-rc-1")
                    .is_some_and(|(uid, _, del)| *uid == disk && !del))
            }
        },
    )
    .await?;
    // Down, and no longer saying it recovers: due a delay after it last said so.
    set_stub_mode(
        &p1,
        json!({"recovering": false, "health": "unhealthy", "observation": "unavailable"}),
    )
    .await?;
    wait_fresh_disk(env, "data-rc-1", &disk, "rc-1").await?;
    wait_event(env, "rc", "MemberReplaced", Duration::from_secs(30)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_handoff() -> Result<()> {
    let Some(mut env) = Env::start("handoff-kill").await? else {
        return Ok(());
    };
    let r = handoff_kill(&mut env).await;
    env.finish(r).await
}

/// One healer run with `--test-halt-after <step>`: waits until it halted there, then
/// SIGKILLs it.
async fn run_until_halt(
    env: &mut Env,
    step: &str,
    trigger: impl std::future::Future<Output = Result<()>>,
) -> Result<()> {
    let mut o = env.healer_options();
    o.halt_after = Some(step.into());
    o.extra = vec![
        "--fresh-disk-age".into(),
        format!("{}s", FRESH_DISK_AGE.as_secs()),
    ];
    let i = env.healer(o)?;
    trigger.await?;
    env.h(i)
        .wait_log("halting for the test", Duration::from_secs(90))
        .await
        .with_context(|| format!("waiting for the healer to halt after {step}"))?;
    env.h_mut(i).kill();
    eprintln!("[handoff-kill] healer SIGKILLed right after step {step:?}");
    Ok(())
}

fn normal_healer(env: &mut Env) -> Result<usize> {
    let mut o = env.healer_options();
    o.extra = vec![
        "--fresh-disk-age".into(),
        format!("{}s", FRESH_DISK_AGE.as_secs()),
    ];
    env.healer(o)
}

async fn handoff_kill(env: &mut Env) -> Result<()> {
    let pods: Api<Pod> = env.api();
    let fleets = [
        env.persistent(&env.ns, "prep", 3),
        env.persistent(&env.ns, "del", 3),
        env.persistent(&env.ns, "com", 3),
        env.persistent(&env.ns, "cd", 3),
    ];
    for f in &fleets {
        env.apply_fleet(&f.yaml()).await?;
    }
    let h = normal_healer(env)?;
    for f in &fleets {
        wait_ready_members(env, &f.identity, 3, Duration::from_secs(120)).await?;
    }
    // The members that go down get Pods newer than their disks (a disk made for the
    // current Pod is never replaced; the healer runs with --fresh-disk-age 3s).
    wait_disks_older_than_new_pods(env, &["data-prep-1", "data-del-1"], FRESH_DISK_AGE).await?;
    for p in ["prep-1", "del-1"] {
        let first = pods.get(p).await?.metadata.uid.clone();
        pods.delete(p, &Default::default()).await?;
        wait_for(&format!("{p} recreated"), Duration::from_secs(60), || {
            let pods = pods.clone();
            let first = first.clone();
            async move {
                Ok(pods
                    .get_opt(p)
                    .await?
                    .filter(|x| x.metadata.uid != first && pod_ready(x))
                    .map(|_| ()))
            }
        })
        .await?;
    }
    env.h_mut(h).terminate();
    let before = claims(env).await?;
    // Absorb window: every other member of prep ready for 10 s.
    wait_ready_for(
        env,
        &["prep-0", "prep-2"],
        ABSORB_WINDOW,
        Duration::from_secs(60),
    )
    .await?;

    // --- 1. killed after prepare: the record is uncommitted, the Pod alive.
    let p1 = pods.get("prep-1").await?;
    let p1_uid = p1.metadata.uid.clone();
    run_until_halt(env, "prepare", async {
        set_stub_mode(&p1, json!({"health": "unhealthy"})).await
    })
    .await?;
    let p = pods.get("prep-1").await?;
    let rec = record(&p).context("no record after prepare")?;
    ensure!(
        held(&p) && !rec.committed && p.metadata.deletion_timestamp.is_none(),
        "after prepare: {:?}",
        p.metadata
    );
    // The member recovers while no healer runs.
    set_stub_mode(&p, json!({"health": "healthy"})).await?;
    wait_for("prep-1 ready again", Duration::from_secs(30), || {
        let pods = pods.clone();
        async move { Ok(pods.get("prep-1").await.ok().filter(pod_ready).map(|_| ())) }
    })
    .await?;
    let h = normal_healer(env)?;
    let ev = wait_event(env, "prep", "DiskHandoffAborted", Duration::from_secs(60)).await?;
    wait_for("prep-1 released", Duration::from_secs(30), || {
        let pods = pods.clone();
        async move {
            Ok(pods
                .get("prep-1")
                .await
                .ok()
                .filter(|p| !markers(p))
                .map(|_| ()))
        }
    })
    .await?;
    let p = pods.get("prep-1").await?;
    ensure!(p.metadata.uid == p1_uid, "prep-1 was deleted");
    ensure!(
        claims(env).await?["data-prep-1"].0 == before["data-prep-1"].0,
        "data-prep-1 changed"
    );
    eprintln!(
        "[handoff-kill] prepared: aborted on restart, Pod and disk kept ({})",
        ev.note
    );
    env.h_mut(h).terminate();

    // --- 2. killed after the guarded Pod delete, before commit.
    let d1 = pods.get("del-1").await?;
    let d1_uid = d1.metadata.uid.clone();
    // Absorb window: every other member of del ready for 10 s.
    wait_ready_for(
        env,
        &["del-0", "del-2"],
        ABSORB_WINDOW,
        Duration::from_secs(60),
    )
    .await?;
    run_until_halt(env, "delete", async {
        set_stub_mode(&d1, json!({"health": "unhealthy"})).await
    })
    .await?;
    let p = pods.get("del-1").await?;
    let rec = record(&p).context("no record after delete")?;
    ensure!(
        held(&p) && !rec.committed && p.metadata.deletion_timestamp.is_some(),
        "after delete: {:?}",
        p.metadata
    );
    let h = normal_healer(env)?;
    wait_event(env, "del", "DiskHandoffAborted", Duration::from_secs(60)).await?;
    wait_for("del-1 back on its disk", Duration::from_secs(90), || {
        let pods = pods.clone();
        let d1_uid = d1_uid.clone();
        async move {
            Ok(pods
                .get_opt("del-1")
                .await?
                .filter(|p| p.metadata.uid != d1_uid && pod_ready(p) && !markers(p))
                .map(|_| ()))
        }
    })
    .await?;
    ensure!(
        claims(env).await?["data-del-1"].0 == before["data-del-1"].0,
        "data-del-1 changed"
    );
    eprintln!(
        "[handoff-kill] deleted but uncommitted: aborted on restart, the member came back on its own disk"
    );
    env.h_mut(h).terminate();

    // --- 3. killed after commit: the restarted healer deletes the old disk and releases.
    let ns = env.ns.clone();
    let control = env.sim.control.clone();
    run_until_halt(env, "commit", async {
        control
            .delete_claim_volume(&ns, "data-com-1")
            .await
            .map(|_| ())
    })
    .await?;
    let p = pods.get("com-1").await?;
    let rec = record(&p).context("no record after commit")?;
    ensure!(
        held(&p) && rec.committed && p.metadata.deletion_timestamp.is_some(),
        "after commit: {:?}",
        p.metadata
    );
    ensure!(
        !claims(env).await?["data-com-1"].2,
        "the claim was deleted before the kill"
    );
    let h = normal_healer(env)?;
    wait_fresh_disk(env, "data-com-1", &before["data-com-1"].0, "com-1").await?;
    eprintln!(
        "[handoff-kill] committed: finished on restart (old disk deleted, member on a fresh one)"
    );
    env.h_mut(h).terminate();

    // --- 4. killed after the claim delete, before release.
    run_until_halt(env, "claim-delete", async {
        control
            .delete_claim_volume(&ns, "data-cd-1")
            .await
            .map(|_| ())
    })
    .await?;
    let p = pods.get("cd-1").await?;
    ensure!(
        held(&p),
        "after claim delete: the hold is gone: {:?}",
        p.metadata
    );
    let c = claims(env).await?;
    ensure!(
        c.get("data-cd-1")
            .is_none_or(|x| x.2 || x.0 != before["data-cd-1"].0),
        "the claim is not deleting"
    );
    let h = normal_healer(env)?;
    wait_fresh_disk(env, "data-cd-1", &before["data-cd-1"].0, "cd-1").await?;
    eprintln!(
        "[handoff-kill] claim deleted, hold not released: released on restart, member on a fresh disk"
    );

    // Nothing else was deleted.
    let after = claims(env).await?;
    for (n, (uid, _, _)) in &before {
        if n == "data-com-1" || n == "data-cd-1" {
            continue;
        }
        ensure!(
            after.get(n).is_some_and(|x| x.0 == *uid && !x.2),
            "{n} changed: {:?}",
            after.get(n)
        );
    }
    ensure!(uids(&after).len() == uids(&before).len());
    let evs = fleet_events(&env.client, &env.ns, None).await?;
    let deletes: Vec<String> = evs
        .iter()
        .filter(|e| e.action == "DeleteClaim")
        .map(|e| e.to_string())
        .collect();
    eprintln!("[handoff-kill] claim deletes over the whole test: {deletes:#?}");
    env.h_mut(h).terminate();
    Ok(())
}
