//! `decide`: the healer's whole judgement, as one pure function.
//!
//! The rules run in a fixed order and the first one that wants to write wins, so a plan
//! never holds more than one action. Every rule is named in a comment (`Rule X1 (...)`),
//! and [`Plan::rule`] names the rule behind the plan, so tests and logs can refer to it.
//!
//! | order | rules | duty |
//! | --- | --- | --- |
//! | 1 | H1-H5 | finish or abort a disk handoff already on a Pod (before any gate) |
//! | 2 | V1, V2 | an identity shared with an older fleet, an invalid live spec: no action |
//! | 3 | D1-D8, K6 | fleet finalizer, deletion protection, and deletion in order; the first `spec.members` of an External fleet |
//! | 4 | P1, V3, I1, W1-W4 | pause, a bucket reserved to another identity, infrastructure drift, the workload's presence, ownership and size |
//! | 5 | F1 | force-delete a member Pod stranded past its grace |
//! | 6 | K1-K5, G1-G5, C1-C3 | capacity target, growth in runs, contraction one by one |
//! | 7 | R1-R7 | disks: terminating claim, lost claim, one member down too long, the cases left alone, zone safety, unschedulable or crash-looping members |
//! | 8 | S1-S4 | the status reported when nothing is written |
//! | last | T1 | a destructive write is held while the healer's clock is not trusted |

mod capacity;
mod contraction;
mod deletion;
mod disk;
mod force_delete;
mod growth;
mod handoff;
pub(crate) mod mutation;
#[cfg(test)]
mod proptests;
mod status;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_clock;
#[cfg(test)]
mod tests_safety;

use crate::rule::Rule;
use celld_api::Profile;
use celld_api::defaults::MAX_MEMBERS;
use celld_api::labels::{claim_ordinal, member_ordinal};

use crate::config::Config;
use crate::plan::{Action, Event, Plan};
use crate::snapshot::{Claim, Fleet, Pod, Snapshot, Workload, WorkloadKind};
use crate::time::{Span, Timestamp};

pub use status::Reason;

/// Ordinals at or above this are never members (the member limit): objects named with
/// one are ignored, so no name can make `decide` allocate or loop beyond the limit.
pub const MAX_ORDINAL: u32 = MAX_MEMBERS as u32;

/// Decides the one next write for a fleet, the status to report and when to look again.
/// Pure: no I/O, and `now` is the only notion of time.
pub fn decide(snapshot: &Snapshot, now: Timestamp, config: &Config) -> Plan {
    let mut cx = Ctx::new(snapshot, now, config);
    let outcome = run(&mut cx);
    let outcome = clock_gate(&mut cx, outcome);
    status::build(&cx, outcome)
}

/// How soon a write held by rule T1 is looked at again: the skew is measured on every
/// response, so the next look may find it back within the bound.
pub const CLOCK_RETRY: Span = Span::secs(30);

/// Rule V2: a fleet blocked by an older one with its identity is decided again this
/// often, since the older fleet's deletion is not an event of this fleet's.
pub const IDENTITY_RECHECK: Span = Span::secs(30);

/// Rule T1 (trusted clock): no destructive write while the healer's clock is further
/// from the API server's than `--max-clock-skew`, or was never measured. The delays are
/// converted so that a skew cannot make them end early (`crate::clock`); a skew this
/// large still means the clocks are not what the operator thinks, and a Pod or a disk
/// can wait until someone looks. Aborting a handoff (which keeps the disk) and every
/// other write go on.
fn clock_gate(cx: &mut Ctx, o: Outcome) -> Outcome {
    if !o.action.as_ref().is_some_and(Action::is_destructive) || !mutation::on("T1") {
        return o;
    }
    let bound = cx.cfg.max_clock_skew;
    let why = match cx.s.clock_skew {
        None => "the healer has not measured its clock against the API server's yet".to_string(),
        Some(skew) if skew.millis().abs() > bound.millis() => format!(
            "the healer's clock is {:.1} s {} the API server's, more than --max-clock-skew ({} s)",
            skew.millis().abs() as f64 / 1000.0,
            if skew.millis() > 0 {
                "ahead of"
            } else {
                "behind"
            },
            bound.millis() / 1000
        ),
        Some(_) => return o,
    };
    cx.wake_at(cx.now + CLOCK_RETRY);
    let message = format!(
        "Holding a destructive write ({}): {why}. Fix the clock of the healer's node (NTP); the write is decided again once the clocks agree",
        o.message
    );
    Outcome::report(Rule::T1, Reason::ClockSkewed, message.clone()).with_event(
        "Warning",
        "ClockSkewed",
        message,
    )
}

/// What the rules concluded.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub action: Option<Action>,
    pub rule: Rule,
    pub reason: Reason,
    pub message: String,
    pub event: Option<Event>,
}

impl Outcome {
    fn act(rule: Rule, action: Action, message: String) -> Outcome {
        Outcome {
            action: Some(action),
            rule,
            reason: Reason::LifecycleProgress,
            message,
            event: None,
        }
    }

    fn report(rule: Rule, reason: Reason, message: String) -> Outcome {
        Outcome {
            action: None,
            rule,
            reason,
            message,
            event: None,
        }
    }

    fn with_event(mut self, type_: &'static str, reason: &'static str, message: String) -> Self {
        self.event = Some(Event {
            type_,
            reason,
            message,
        });
        self
    }
}

/// Per-member facts gathered for the status while the rules run.
#[derive(Clone, Debug, Default)]
pub(crate) struct MemberNote {
    pub replace_at: Option<Timestamp>,
    pub message: Option<String>,
}

/// The snapshot, indexed once, and what the rules learn on the way.
pub(crate) struct Ctx<'a> {
    pub s: &'a Snapshot,
    pub fleet: &'a Fleet,
    pub now: Timestamp,
    pub cfg: &'a Config,
    /// The workload, whatever its ownership.
    pub workload: Option<&'a Workload>,
    /// Member Pods (our identity, controlled by the workload), by ordinal for a
    /// StatefulSet. Deployment members are only in `member_list`.
    pub members: Vec<Option<&'a Pod>>,
    /// Every member Pod, in snapshot order.
    pub member_list: Vec<&'a Pod>,
    /// Claims at member names by ordinal, whatever their identity.
    pub claims: Vec<Option<&'a Claim>>,
    /// Earliest time a rule must be re-evaluated.
    pub wake: Option<Timestamp>,
    /// Per-ordinal notes for the status.
    pub notes: Vec<MemberNote>,
    /// The capacity target, once computed.
    pub target: Option<capacity::Target>,
    /// Objects ignored for an out-of-range ordinal (reported in the plan).
    pub ignored: Vec<String>,
    /// A member Pod held past a force delete by someone else's finalizer (rule F1's
    /// report), shown when no other rule has anything to say.
    pub held_note: Option<String>,
    /// `held_note` is about a member stuck terminating on a Ready node (rule F2): a
    /// person must look, so it is reported Blocked.
    pub stuck: bool,
}

impl<'a> Ctx<'a> {
    fn new(s: &'a Snapshot, now: Timestamp, cfg: &'a Config) -> Ctx<'a> {
        let fleet = &s.fleet;
        let workload = s.workload.as_ref().filter(|w| w.name == fleet.name);
        let mut ignored = Vec::new();
        let mut members: Vec<Option<&Pod>> = Vec::new();
        let mut member_list = Vec::new();
        for p in &s.pods {
            let controlled = match (workload, &p.controller) {
                (Some(w), Some(c)) => {
                    c.uid == w.uid
                        && match w.kind {
                            WorkloadKind::StatefulSet => c.kind == "StatefulSet",
                            // A Deployment's Pods are controlled by its ReplicaSets; the
                            // runtime resolves them to the Deployment's uid.
                            WorkloadKind::Deployment => true,
                        }
                }
                _ => false,
            };
            if !controlled || p.identity.as_deref() != Some(fleet.identity.as_str()) {
                continue;
            }
            if workload.is_some_and(|w| w.kind == WorkloadKind::StatefulSet) {
                // A StatefulSet only makes Pods named `<set>-<n>`; anything else it
                // controls is not a member slot.
                match member_ordinal(&fleet.name, &p.name) {
                    Some(o) if o < MAX_ORDINAL => {
                        let o = o as usize;
                        if members.len() <= o {
                            members.resize(o + 1, None);
                        }
                        members[o] = Some(p);
                    }
                    _ => {
                        ignored.push(format!(
                            "Pod {}: not a member name below ordinal {MAX_ORDINAL}",
                            p.name
                        ));
                        continue;
                    }
                }
            }
            member_list.push(p);
        }
        let mut claims: Vec<Option<&Claim>> = Vec::new();
        for c in &s.claims {
            match claim_ordinal(&fleet.name, &c.name) {
                Some(o) if o < MAX_ORDINAL => {
                    let o = o as usize;
                    if claims.len() <= o {
                        claims.resize(o + 1, None);
                    }
                    claims[o] = Some(c);
                }
                Some(_) => ignored.push(format!(
                    "PersistentVolumeClaim {}: ordinal at or above the member limit {MAX_ORDINAL}",
                    c.name
                )),
                // Same identity, another name: another fleet's disk (a copied fleet
                // file), never this fleet's to count, hold or delete.
                None => {}
            }
        }
        Ctx {
            s,
            fleet,
            now,
            cfg,
            workload,
            members,
            member_list,
            claims,
            wake: None,
            notes: Vec::new(),
            target: None,
            ignored,
            held_note: None,
            stuck: false,
        }
    }

    /// Whether a Pod's name makes it one of this fleet's member slots (StatefulSet
    /// `<fleet>-<n>` below the limit), whoever controls it now.
    pub fn member_named(&self, p: &Pod) -> bool {
        member_ordinal(&self.fleet.name, &p.name).is_some_and(|o| o < MAX_ORDINAL)
    }

    /// Why a handoff must be aborted rather than finished (V1, V2, V3), if it must.
    pub fn restricted(&self) -> Option<&'static str> {
        if self.fleet.identity_conflict.is_some() {
            Some("an older fleet carries the same identity")
        } else if !self.fleet.invalid.is_empty() {
            Some("its live spec is invalid")
        } else if self.storage_conflict().is_some() {
            Some("its bucket is reserved to another identity")
        } else {
            None
        }
    }

    /// Rule V3's condition: the bucket reservation names another fleet (another
    /// identity, or this identity under another name or namespace: a copy). Returns the
    /// reservation's name and its holder.
    pub fn storage_conflict(&self) -> Option<(&'a str, &'a str)> {
        let r = self.fleet.reservation.as_ref()?;
        let found = r.found.as_ref().filter(|f| !f.this_fleet)?;
        Some((r.name.as_str(), found.holder.as_str()))
    }

    /// Asks to be woken at `t` (the earliest request wins).
    pub fn wake_at(&mut self, t: Timestamp) {
        if t > self.now {
            self.wake = Some(self.wake.map_or(t, |w| w.min(t)));
        }
    }

    /// The member Pod at an ordinal.
    pub fn member(&self, o: usize) -> Option<&'a Pod> {
        self.members.get(o).copied().flatten()
    }

    /// The claim at an ordinal's name, whatever its identity.
    pub fn claim_at(&self, o: usize) -> Option<&'a Claim> {
        self.claims.get(o).copied().flatten()
    }

    /// The claim at an ordinal, only if it is ours to act on.
    pub fn own_claim(&self, o: usize) -> Option<&'a Claim> {
        self.claim_at(o).filter(|c| self.claim_is_ours(c))
    }

    /// A claim carrying our identity and no owner: the healer may act on it.
    pub fn claim_is_ours(&self, c: &Claim) -> bool {
        c.identity.as_deref() == Some(self.fleet.identity.as_str()) && c.owner.is_none()
    }

    /// A workload the healer may act on: our identity, no owners, the expected kind.
    pub fn workload_is_ours(&self, w: &Workload) -> bool {
        let kind = if self.fleet.stateful_set {
            WorkloadKind::StatefulSet
        } else {
            WorkloadKind::Deployment
        };
        w.identity.as_deref() == Some(self.fleet.identity.as_str())
            && !w.has_owner_references
            && w.kind == kind
    }

    /// Notes for one ordinal.
    pub fn note(&mut self, o: usize) -> &mut MemberNote {
        if self.notes.len() <= o {
            self.notes.resize(o + 1, MemberNote::default());
        }
        &mut self.notes[o]
    }
}

/// Rule W6's report: the first claim at one of the fleet's member names that carries
/// its identity and an owner.
pub(crate) fn owned_claim(cx: &Ctx) -> Option<Outcome> {
    let identity = cx.fleet.identity.as_str();
    let (c, owner) = cx.claims.iter().flatten().find_map(|c| {
        (c.identity.as_deref() == Some(identity))
            .then_some(())
            .and(c.owner.as_deref().map(|o| (c, o)))
    })?;
    let (reason, doing) = if cx.fleet.deleting {
        (Reason::DeletionBlocked, "deletion waits")
    } else {
        (Reason::LifecycleBlocked, "lifecycle actions are held")
    };
    Some(Outcome::report(
        Rule::W6,
        reason,
        format!(
            "Claim {} carries this fleet's identity but is owned by {owner}: the garbage collector would delete it with its owner, so the healer neither uses nor replaces it and {doing}. Remove the owner reference (restoring the StatefulSet's persistentVolumeClaimRetentionPolicy to Retain makes its controller do so)",
            c.name
        ),
    ))
}

/// What a replica rule concluded.
pub(crate) enum Step {
    /// Write this.
    Write(Outcome),
    /// Waiting or blocked, with what to report if nothing else happens.
    Hold(Outcome),
}

fn run(cx: &mut Ctx) -> Outcome {
    // Rules H1-H5 (handoff resolution): a record on a Pod is settled before any gate,
    // pause, deletion or drift included, so a hold never outlives the healer's interest.
    if let Some(o) = handoff::resolve(cx) {
        return o;
    }
    // Rule V2 (identity conflict): an older fleet carries this identity, so nothing
    // labelled with it can be proven this fleet's. No growth, healing or deletion; a
    // deleted one is released without deleting anything (the disks stay the older
    // fleet's to use or keep).
    if let Some(other) = cx
        .fleet
        .identity_conflict
        .as_ref()
        .filter(|_| mutation::on("V2"))
    {
        if cx.fleet.deleting && cx.fleet.has_finalizer {
            return Outcome::act(
                Rule::V2,
                Action::RemoveFleetFinalizer {
                    uid: cx.fleet.uid.clone(),
                    resource_version: cx.fleet.resource_version.clone(),
                },
                format!(
                    "Releasing the CelldFleet without deleting anything: fleet {other} has the same identity, so no workload or disk can be proven this fleet's"
                ),
            );
        }
        // The older fleet going brings no event of this one's: look again now and then
        // (from the caches; no request).
        cx.wake_at(cx.now + IDENTITY_RECHECK);
        return Outcome::report(
            Rule::V2,
            Reason::IdentityConflict,
            format!(
                "Fleet {other} is older and has the same spec.identity; the healer takes no action for this fleet. Give this fleet its own identity: delete it and create it again from `celld-gen init` (never a copy of another fleet's file)"
            ),
        );
    }
    // Rule V1 (invalid configuration): the live spec fails the same validation as
    // `celld-gen check`; nothing is acted on from an invalid object.
    if !cx.fleet.invalid.is_empty() && mutation::on("V1") {
        return Outcome::report(
            Rule::V1,
            Reason::InvalidConfiguration,
            format!(
                "The live spec is invalid, so the healer takes no action: {}",
                cx.fleet.invalid.join("; ")
            ),
        );
    }
    // Rules D2-D8 (deletion) run before pause and drift: deleting the fleet is explicit.
    if cx.fleet.deleting {
        return deletion::run(cx);
    }
    // Rule D1 (finalizer): deletion can only run in order if the finalizer is there.
    if !cx.fleet.has_finalizer {
        return Outcome::act(
            Rule::D1,
            Action::AddFleetFinalizer {
                uid: cx.fleet.uid.clone(),
                resource_version: cx.fleet.resource_version.clone(),
            },
            "Adding the finalizer that lets the healer delete the fleet in order".into(),
        );
    }
    // Rule K6 (External start): `/scale` needs spec.members to exist. It changes no
    // workload, member or disk, so it comes before the pause and the other holds.
    if let Some(o) = capacity::initialize_external(cx) {
        return o;
    }
    // Rule P1 (pause): no lifecycle action at all while paused.
    if cx.fleet.paused {
        capacity::compute(cx);
        return Outcome::report(
            Rule::P1,
            Reason::MaintenancePaused,
            "Maintenance pause: the healer makes no change to the workload, its members or their disks".into(),
        );
    }
    // Rule V3 (storage scope): the bucket and prefix are reserved to another identity;
    // growing or healing would let two fleets write one bucket scope.
    if let Some((reservation, owner)) = cx.storage_conflict().filter(|_| mutation::on("V3")) {
        capacity::compute(cx);
        return Outcome::report(
            Rule::V3,
            Reason::StorageScopeConflict,
            format!(
                "CelldBucketReservation {reservation} reserves this bucket and prefix for {owner}, not this fleet; the healer does not grow or heal it. Use another bucket or prefix"
            ),
        );
    }
    // Rule I1 (infrastructure drift): a live prerequisite differs from the rendering.
    if !cx.s.infrastructure.drift.is_empty() {
        capacity::compute(cx);
        return Outcome::report(
            Rule::I1,
            Reason::InfrastructureBlocked,
            format!(
                "Live prerequisites differ from the rendering, so lifecycle actions are held: {}",
                cx.s.infrastructure.drift.join("; ")
            ),
        );
    }
    let Some(w) = cx.workload else {
        // Rule W1 (workload missing): Argo CD or Flux creates it; nothing to do here.
        capacity::compute(cx);
        let kind = if cx.fleet.stateful_set {
            "StatefulSet"
        } else {
            "Deployment"
        };
        return Outcome::report(
            Rule::W1,
            Reason::WorkloadMissing,
            format!(
                "Waiting for Argo CD or Flux to create the {kind} {}",
                cx.fleet.name
            ),
        );
    };
    if !cx.workload_is_ours(w) {
        // Rule W2 (foreign workload): not ours to scale or heal.
        capacity::compute(cx);
        return Outcome::report(
            Rule::W2,
            Reason::LifecycleBlocked,
            format!(
                "{} {} is not this fleet's: it lacks the identity label, has owners or is the wrong kind; the healer leaves it alone",
                w.kind.as_str(),
                w.name
            ),
        );
    }
    if w.deleting {
        // Rule W3 (workload deleting): wait for it to go and be recreated.
        capacity::compute(cx);
        return Outcome::report(
            Rule::W3,
            Reason::Provisioning,
            format!(
                "{} {} is being deleted; waiting for Argo CD or Flux to recreate it",
                w.kind.as_str(),
                w.name
            ),
        );
    }
    // Rule W4 (workload size): a hand-scaled workload beyond the member limit is not
    // acted on; nothing is sized from it.
    if w.replicas > MAX_MEMBERS {
        capacity::compute(cx);
        return Outcome::report(
            Rule::W4,
            Reason::LifecycleBlocked,
            format!(
                "{} {} has {} replicas, above the member limit {MAX_MEMBERS}; the healer takes no action until it is scaled back (set spec.members instead)",
                w.kind.as_str(),
                w.name,
                w.replicas
            ),
        );
    }
    // Rule W6 (owned claim): a claim at a member's name with the fleet's identity that
    // something owns is neither used nor replaced nor treated as foreign: the garbage
    // collector deletes it with its owner (a hand-edited retention policy adds such
    // owners), so no Pod or disk is touched until a person removes the owner.
    if let Some(o) = owned_claim(cx).filter(|_| mutation::on("W6")) {
        capacity::compute(cx);
        return o;
    }
    // Rule F1 (force-deletion), every StatefulSet fleet.
    if w.kind == WorkloadKind::StatefulSet
        && let Some(o) = force_delete::check(cx)
    {
        return o;
    }
    // Rules K1-K5, G1-G5, C1-C3: the replica count.
    let target = capacity::compute(cx);
    let step = if target.members > w.replicas {
        Some(growth::step(cx, w, &target))
    } else if target.members < w.replicas {
        Some(contraction::step(cx, w, &target))
    } else {
        // Rule G1 also reports a foreign claim already under a member.
        growth::conflict_in_use(cx, w).map(Step::Hold)
    };
    let hold = match step {
        Some(Step::Write(o)) => return o,
        Some(Step::Hold(o)) => Some(o),
        None => None,
    };
    // Rules R1-R7: disks and down members (PersistentFleet only).
    let mut note = None;
    if cx.fleet.profile == Profile::PersistentFleet && w.kind == WorkloadKind::StatefulSet {
        match disk::heal(cx, w) {
            disk::Heal::Act(o) | disk::Heal::Blocked(o) => return o,
            disk::Heal::Note(m) => note = Some(m),
            disk::Heal::Nothing => {}
        }
    }
    if let Some(o) = hold {
        return o;
    }
    // Rule S2 (waiting on members): a Pod held past its force delete (rule F1: only a
    // person can release it, so it is named first), or a note from the disk rules.
    if let Some(m) = cx.held_note.clone().or(note) {
        let reason = if cx.held_note.is_some() && cx.stuck {
            Reason::MemberStuckTerminating
        } else {
            Reason::Provisioning
        };
        return Outcome::report(Rule::S2, reason, m);
    }
    // Rule S3 (rolling out).
    if !w.rolled_out() {
        return Outcome::report(
            Rule::S3,
            Reason::Provisioning,
            "Rolling out: waiting for every member to run the current template and be ready".into(),
        );
    }
    // Rule S1 (steady).
    Outcome::report(
        Rule::S1,
        Reason::Provisioned,
        format!(
            "All {} members are ready on the current template",
            w.replicas
        ),
    )
}
