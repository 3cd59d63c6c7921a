//! Rules R1-R7: members and their disks (PersistentFleet only).
//!
//! - R1 (terminating claim): a claim already deleting (by hand, or a handoff released
//!   before it finished) while its member's Pod still runs on a node: delete the Pod with
//!   uid + resourceVersion so the claim can go and the StatefulSet makes a fresh one.
//! - R2 (lost claim): a claim in phase Lost gets a fresh disk through the handoff, however
//!   many members are down; its Pod must exist (it holds the name during the handoff).
//! - R3 (one member down too long): the only member down, on a Bound disk older than its
//!   Pod, down for the replacement delay while every other member has been ready for the
//!   absorb window: fresh disk through the handoff. Both delays are the healer's own
//!   observation (rule T2, [`seen_since`]), not the kubelet's timestamps.
//! - R4 (left alone): a fresh disk would not help, or could lose writes: a member waiting
//!   on its image or configuration, a crash-looping member (see [`crash_looping`]), a
//!   member already on a disk made for its current Pod, a member with no Bound disk, a
//!   member down while another is down or became ready too recently.
//! - R5 (zone safety): no fresh disk (R1, R2, R3) until the StatefulSet observed its spec
//!   and the scheduler decided every other member's Pod (on a node, or unschedulable).
//! - R6 (unschedulable): a member the scheduler cannot place, not being replaced, is
//!   reported `Blocked/MemberUnschedulable` once the replacement delay passed.
//! - R7 (crash loop): a crash-looping member is reported `Blocked/MemberCrashLooping` once
//!   the replacement delay passed; its disk is never replaced automatically.
//! - R9 (recovering is not down): a member whose celld answers that it is recovering its
//!   predecessor's log (503 "predecessor recovery in progress" on its internal port) is
//!   not down: its down time for R3 counts from the last time the healer heard that, so
//!   only a member that answered nothing of the kind for the whole replacement delay
//!   gets a fresh disk. Recovery may take far longer than the delay, and a fresh disk
//!   would throw away the copy it recovers from. While heard recovering, the member is
//!   asked again at least four times per delay ([`RECHECKS_PER_DELAY`]).
//! - R8 (several disks lost): more than one of the fleet's claims Lost at once is an
//!   incident (storage, a restore), not routine: no disk is replaced (`Blocked/DisksLost`,
//!   naming the claims) until the claims recover or an operator accepts the loss of
//!   exactly those claims (annotation `fleet.celld.dev/accept-disk-loss` with their
//!   uids). A glitch that marks every claim Lost must not replace every disk.

use crate::rule::Rule;
use celld_api::labels::member_name;

use super::{Ctx, Outcome, Reason};
use crate::plan::{Action, Handoff, HandoffCause};
use crate::record::HandoffRecord;
use crate::snapshot::{Claim, ClaimPhase, Pod, Workload};
use crate::time::Timestamp;

pub(crate) enum Heal {
    Act(Outcome),
    Blocked(Outcome),
    Note(String),
    Nothing,
}

/// Whether a member crash-loops: a container waits in CrashLoopBackOff, or a container
/// exited and was restarted after the member went down.
///
/// Decision on the anchor's open question (crash-looping members): such a member is left
/// alone, like one waiting on its image or configuration, and reported as Blocked after
/// the replacement delay. A crash loop means celld starts and exits. The likely causes
/// are a bad setting or binary (a fresh disk changes nothing and the rollout of the next
/// member is already stalled), a self-fence loop while the node cannot reach the bucket
/// (a fresh disk would throw away writes for nothing), or predecessor recovery running
/// out of attempts. Only the last is helped by a fresh disk, and there a fresh disk turns
/// "not yet recovered" into a declared loss for that member's sessions: a decision for a
/// person, who can delete the claim by hand. A member whose node died stops restarting
/// containers, so it is still replaced by R3.
pub fn crash_looping(p: &Pod) -> bool {
    p.crash_loop_backoff
        || p.last_container_exit
            .is_some_and(|t| !p.is_ready() && t >= p.not_ready_since())
}

/// Rule R9: how many times per replacement delay a member heard recovering is looked at
/// (and so asked) again, so that "nothing heard for the whole delay" rests on several
/// questions, not one.
pub const RECHECKS_PER_DELAY: i64 = 4;

/// Why a down member is not due for a fresh disk.
enum LeftAlone {
    NoPod,
    Terminating,
    NotBound,
    ConfigWait(String),
    CrashLoop,
    DiskMadeForPod,
    OthersNotSettled {
        member: String,
        until: Option<Timestamp>,
    },
}

pub(crate) fn heal(cx: &mut Ctx, w: &Workload) -> Heal {
    let n = w.replicas.max(0) as usize;
    let name = cx.fleet.name.clone();
    // Rule R5 (zone safety): ordinals whose Pod the scheduler has not decided.
    let undecided: Vec<usize> = (0..n)
        .filter(|&o| !cx.member(o).is_some_and(|p| p.schedule_decided()))
        .collect();
    let observed = w.observed();
    let fresh = |o: usize| observed && undecided.iter().all(|&u| u == o);
    let zone_wait = |o: usize| {
        if !observed {
            "waiting for the StatefulSet to observe its spec first".to_string()
        } else {
            let other = undecided.iter().find(|&&u| u != o).copied().unwrap_or(o);
            format!(
                "waiting for the scheduler to place member {}, or find no node for it, first",
                member_name(&name, other as u32)
            )
        }
    };

    // Rule R8 (several disks lost).
    let lost: Vec<&Claim> = (0..n)
        .filter_map(|o| cx.own_claim(o))
        .filter(|c| c.phase == ClaimPhase::Lost && !c.terminating())
        .collect();
    let accepted = |c: &&Claim| cx.fleet.accepted_disk_loss.contains(&c.uid);
    if lost.len() > 1 && !lost.iter().all(accepted) && super::mutation::on("R8") {
        let names: Vec<String> = lost
            .iter()
            .map(|c| format!("{} (uid {})", c.name, c.uid))
            .collect();
        let uids: Vec<&str> = lost.iter().map(|c| c.uid.as_str()).collect();
        return Heal::Blocked(Outcome::report(
            Rule::R8,
            Reason::DisksLost,
            format!(
                "{} claims are Lost at once: {}. That is a storage incident, not a member to heal: no disk is replaced until they recover. To accept losing their data and give each member a fresh disk: kubectl annotate celldfleet {} -n {} {}={}",
                lost.len(),
                names.join(", "),
                cx.fleet.name,
                cx.fleet.namespace,
                celld_api::labels::ACCEPT_DISK_LOSS,
                uids.join(",")
            ),
        ));
    }
    let mut down = Vec::new();
    let mut note: Option<String> = None;
    for o in 0..n {
        let pod = cx.member(o);
        let claim = cx.own_claim(o);
        let m = member_name(&name, o as u32);
        let live = |p: &&Pod| !p.terminating();
        if let Some(c) = claim.filter(|c| c.terminating()) {
            // Rule R1 (terminating claim).
            if let Some(p) = pod.filter(live).filter(|p| p.node_name.is_some()) {
                if fresh(o) {
                    return Heal::Act(Outcome::act(
                        Rule::R1,
                        Action::DeletePod {
                            name: p.name.clone(),
                            uid: p.uid.clone(),
                            resource_version: p.resource_version.clone(),
                        },
                        format!(
                            "Replacing member {m}: its disk {} is being deleted, so its Pod goes and it returns on a fresh disk",
                            c.name
                        ),
                    ));
                }
                note.get_or_insert_with(|| {
                    format!("member {m}'s disk is being deleted; {}", zone_wait(o))
                });
            }
        } else if let Some(c) = claim.filter(|c| c.phase == ClaimPhase::Lost) {
            // Rule R2 (lost claim), guarded by R5 and confirmed: Lost can be transient
            // (a restore may bring claims back before their volumes), so the claim must
            // have stayed Lost for the confirmation window.
            let confirmed_at = c.lost_since.unwrap_or(cx.now) + cx.cfg.lost_confirmation;
            if cx.now < confirmed_at && super::mutation::on("R2-window") {
                cx.wake_at(confirmed_at);
                note.get_or_insert_with(|| {
                    format!(
                        "member {m}'s disk is reported lost; it gets a fresh disk if it is still lost at {}",
                        confirmed_at.rfc3339()
                    )
                });
            } else {
                if !fresh(o) {
                    return Heal::Note(format!(
                        "member {m}'s disk is lost; before giving it a fresh one, {}",
                        zone_wait(o)
                    ));
                }
                let Some(p) = pod.filter(live) else {
                    return Heal::Note(format!(
                        "member {m}'s disk is lost; waiting for its Pod before replacing it"
                    ));
                };
                let message = format!(
                    "Replacing member {m}: its volume no longer exists; celld records a bounded loss for any session with no other copy"
                );
                return Heal::Act(handoff(cx, p, c, HandoffCause::LostDisk, &m).with_event(
                    "Warning",
                    "MemberDiskLost",
                    message,
                ));
            }
        }
        if pod.is_none_or(|p| p.terminating() || !p.is_ready()) {
            down.push(o);
        }
    }

    // Rule R3 (one member down too long).
    let mut planned = false;
    if down.len() == 1 {
        let o = down[0];
        let m = member_name(&name, o as u32);
        match due(cx, n, o) {
            Ok(due) => {
                planned = true;
                cx.note(o).replace_at = Some(due);
                let p = cx.member(o).expect("due needs a Pod");
                let what = describe_down(&m, p);
                if cx.now < due {
                    cx.wake_at(due);
                    if p.recovering_seen.is_some() {
                        // Rule R9: ask it again before the delay could run out.
                        let step = crate::time::Span(
                            (cx.cfg.replacement_delay.millis() / RECHECKS_PER_DELAY).max(1_000),
                        );
                        cx.wake_at(cx.now + step);
                    }
                    note = Some(format!(
                        "{what}; it gets a fresh disk at {} unless it returns",
                        due.rfc3339()
                    ));
                } else if !fresh(o) {
                    // Rule R5 (zone safety) holds the due replacement.
                    note = Some(format!(
                        "{what}; it is due for a fresh disk, {}",
                        zone_wait(o)
                    ));
                } else {
                    let c = cx.own_claim(o).expect("due needs a claim");
                    let message = format!(
                        "Replacing member {m}: seen down since {} while the rest of the fleet is ready; it returns on a fresh disk",
                        down_since(cx, p).rfc3339()
                    );
                    return Heal::Act(handoff(cx, p, c, HandoffCause::DownTooLong, &m).with_event(
                        "Warning",
                        "MemberReplaced",
                        message,
                    ));
                }
            }
            Err(why) => {
                // Rule R4 (left alone).
                let what = cx
                    .member(o)
                    .map_or(format!("member {m} is missing"), |p| describe_down(&m, p));
                let msg = match why {
                    LeftAlone::NoPod => {
                        format!("{what}; waiting for the StatefulSet to recreate it")
                    }
                    LeftAlone::Terminating => match cx.member(o).filter(|p| p.force_deleted) {
                        // Held by someone else's finalizer after F1: that owner must act.
                        Some(p) if !p.other_finalizers.is_empty() => format!(
                            "{what}; it was force-deleted but finalizer {} keeps it, so it returns once that finalizer's owner releases it",
                            p.other_finalizers.join(", ")
                        ),
                        _ => format!("{what}; waiting for its Pod to finish terminating"),
                    },
                    LeftAlone::NotBound => {
                        format!("{what}; it has no bound disk yet, so a fresh one would not help")
                    }
                    LeftAlone::ConfigWait(r) => format!(
                        "{what}; it waits on its image or configuration ({r}), which a fresh disk would not fix"
                    ),
                    LeftAlone::CrashLoop => {
                        format!("{what}; it is crash-looping, which a fresh disk would not fix")
                    }
                    LeftAlone::DiskMadeForPod => format!(
                        "{what}; its disk was made for its current Pod, so another would not help"
                    ),
                    LeftAlone::OthersNotSettled { member, until } => {
                        if let Some(t) = until {
                            cx.wake_at(t);
                        }
                        format!(
                            "{what}; it is not replaced until member {member} has been ready for {} minutes",
                            cx.cfg.absorb_window.millis() / 60_000
                        )
                    }
                };
                cx.note(o).message = Some(msg.clone());
                note.get_or_insert(msg);
            }
        }
    } else if down.len() > 1 {
        let names: Vec<String> = down.iter().map(|&o| member_name(&name, o as u32)).collect();
        note.get_or_insert_with(|| {
            format!(
                "members {} are down; none gets a fresh disk while more than one is down",
                names.join(", ")
            )
        });
    }

    // Rules R6/R7 (blocked members), only when no replacement is planned.
    if !planned {
        for &o in &down {
            let Some(p) = cx.member(o).filter(|p| !p.terminating()) else {
                continue;
            };
            let m = member_name(&name, o as u32);
            let others: Vec<String> = down
                .iter()
                .filter(|&&d| d != o)
                .map(|&d| member_name(&name, d as u32))
                .collect();
            let suffix = if others.is_empty() {
                String::new()
            } else {
                format!(
                    "; it is not replaced while {} {} also down",
                    others.join(", "),
                    if others.len() == 1 { "is" } else { "are" }
                )
            };
            if let Some(u) = &p.unschedulable {
                // Rule R6 (unschedulable).
                let since = u.since.unwrap_or(p.created);
                if cx.now < since + cx.cfg.replacement_delay {
                    cx.wake_at(since + cx.cfg.replacement_delay);
                    note.get_or_insert_with(|| describe_down(&m, p));
                    break;
                }
                let msg = u.message.trim_end_matches([' ', '.']);
                return Heal::Blocked(Outcome::report(
                    Rule::R6,
                    Reason::MemberUnschedulable,
                    format!(
                        "Member {m} has not been scheduled since {}: {msg}{suffix}",
                        since.rfc3339()
                    ),
                ));
            }
            // Rule R7 (crash loop). A member now waiting on its image or configuration is
            // reported as waiting (R4), even if its container exited before: that wait is
            // the cause to fix, and a restart after it is not a crash loop.
            if p.config_wait.is_none() && crash_looping(p) {
                let since = p.not_ready_since();
                if cx.now < since + cx.cfg.replacement_delay {
                    cx.wake_at(since + cx.cfg.replacement_delay);
                    note.get_or_insert_with(|| format!("member {m} is crash-looping"));
                    break;
                }
                return Heal::Blocked(Outcome::report(
                    Rule::R7,
                    Reason::MemberCrashLooping,
                    format!(
                        "Member {m} has been crash-looping since {}; a fresh disk would not fix a configuration or runtime fault, so the healer leaves it to an operator{suffix}",
                        since.rfc3339()
                    ),
                ));
            }
        }
    }
    match note {
        Some(m) => Heal::Note(m),
        None => Heal::Nothing,
    }
}

/// When the single down member `o` gets a fresh disk, or why it is left alone.
fn due(cx: &Ctx, n: usize, o: usize) -> Result<Timestamp, LeftAlone> {
    let p = cx.member(o).ok_or(LeftAlone::NoPod)?;
    if p.terminating() {
        return Err(LeftAlone::Terminating);
    }
    let c = cx
        .own_claim(o)
        .filter(|c| c.phase == ClaimPhase::Bound && !c.terminating())
        .ok_or(LeftAlone::NotBound)?;
    if let Some(r) = &p.config_wait {
        return Err(LeftAlone::ConfigWait(r.clone()));
    }
    if crash_looping(p) {
        return Err(LeftAlone::CrashLoop);
    }
    if c.created + cx.cfg.fresh_disk_age >= p.created {
        return Err(LeftAlone::DiskMadeForPod);
    }
    for other in (0..n).filter(|&x| x != o) {
        let q = cx.member(other);
        let ready_since = q
            .filter(|q| !q.terminating() && q.is_ready())
            .map(|q| seen_since(cx, q));
        let settled_at = ready_since.map(|t| t + cx.cfg.absorb_window);
        if settled_at.is_none_or(|t| t > cx.now) {
            return Err(LeftAlone::OthersNotSettled {
                member: member_name(&cx.fleet.name, other as u32),
                until: settled_at,
            });
        }
    }
    Ok(down_since(cx, p) + cx.cfg.replacement_delay)
}

/// Since when a member counts as down for rule R3: seen down (rule T2), and, by rule R9,
/// not heard recovering since.
fn down_since(cx: &Ctx, p: &Pod) -> Timestamp {
    let seen = seen_since(cx, p);
    match p.recovering_seen {
        Some(heard) if super::mutation::on("R9") => seen.max(heard.min(cx.now)),
        _ => seen,
    }
}

/// Rule T2 (observed, not reported, time): since when a member has been in its current
/// state (ready, or down), as the healer itself has watched it on its monotonic clock
/// ([`crate::clock::Observations`]), never by the kubelet's timestamps: a node whose
/// clock is behind would make a blip look like minutes down. Not observed yet counts as
/// from now.
fn seen_since(cx: &Ctx, p: &Pod) -> Timestamp {
    if !super::mutation::on("T2") {
        // The mutation check: the kubelet's own transition time, as before T2.
        return match p.ready {
            Some(c) if p.is_ready() => c.since.unwrap_or(cx.now),
            _ => p.not_ready_since(),
        };
    }
    p.seen_since.unwrap_or(cx.now).min(cx.now)
}

fn describe_down(m: &str, p: &Pod) -> String {
    if let Some(u) = &p.unschedulable {
        format!(
            "member {m} cannot be scheduled ({})",
            u.message.trim_end_matches([' ', '.'])
        )
    } else if p.terminating() {
        format!("member {m} is terminating")
    } else if let Some(t) = p.recovering_seen {
        format!(
            "member {m} is recovering its predecessor's log (last heard at {})",
            t.rfc3339()
        )
    } else {
        format!("member {m} is down")
    }
}

fn handoff(_cx: &Ctx, p: &Pod, c: &Claim, cause: HandoffCause, m: &str) -> Outcome {
    let record = HandoffRecord {
        identity: _cx.fleet.identity.clone(),
        claim_uid: c.uid.clone(),
        claim_resource_version: c.resource_version.clone(),
        committed: false,
        cause: Some(cause),
    };
    let why = match cause {
        HandoffCause::LostDisk => "its disk is lost",
        HandoffCause::DownTooLong => "it stayed down past the replacement delay",
    };
    Outcome::act(
        match cause {
            HandoffCause::LostDisk => Rule::R2,
            HandoffCause::DownTooLong => Rule::R3,
        },
        Action::StartHandoff(Handoff {
            pod: p.name.clone(),
            pod_uid: p.uid.clone(),
            pod_resource_version: p.resource_version.clone(),
            claim: c.name.clone(),
            claim_uid: c.uid.clone(),
            claim_resource_version: c.resource_version.clone(),
            cause,
            record,
        }),
        format!("Replacing member {m} on a fresh disk: {why}"),
    )
}
