//! A shared fresh read's lists decoded whole and without managed fields (the fresh reads'
//! way, `celld_healer::lean_json`), compared in one run.
//!
//! `cargo bench -p celld-healer --bench fresh_decode`. The lists are what one shared read
//! of 64 fleets brings: 192 member Pods and 64 StatefulSets, each a copy of a real object
//! of the tests' cluster (`fixtures/`, as the API server listed it, managed fields and
//! all) under its own name. For each decode: the best time of twenty rounds and the most
//! heap it held at once (a counting allocator), the text itself not counted.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use celld_healer::lean_json::without_managed_fields;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ObjectList;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The system allocator, counting the bytes held and their high-water mark.
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);
static MOST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let held = HELD.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        MOST.fetch_max(held, Ordering::Relaxed);
        // SAFETY: as the caller's contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as the caller's contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A list of `n` copies of the fixture, each named `<name>-<i>`.
fn list(fixture: &str, kind: &str, n: usize) -> String {
    let one: Value = serde_json::from_str(fixture).expect("the fixture is JSON");
    let items: Vec<Value> = (0..n)
        .map(|i| {
            let mut o = one.clone();
            let name = format!("{}-{i}", o["metadata"]["name"].as_str().unwrap_or("x"));
            o["metadata"]["name"] = Value::String(name);
            o
        })
        .collect();
    serde_json::to_string(&serde_json::json!({
        "apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": "1"}, "items": items
    }))
    .expect("a list")
}

/// The best time of twenty rounds of `f`, and the most heap one call held above what was
/// held before it.
fn measure<T>(f: impl Fn() -> T) -> (f64, usize) {
    let before = HELD.load(Ordering::Relaxed);
    MOST.store(before, Ordering::Relaxed);
    black_box(f());
    let most = MOST.load(Ordering::Relaxed) - before;
    let mut best = f64::MAX;
    for _ in 0..20 {
        let start = Instant::now();
        black_box(f());
        best = best.min(start.elapsed().as_secs_f64() * 1e3);
    }
    (best, most)
}

fn compare<K: DeserializeOwned + Clone>(what: &str, text: &str) {
    let whole = measure(|| serde_json::from_str::<ObjectList<K>>(text).expect("decodes"));
    let lean = measure(|| {
        serde_json::from_str::<ObjectList<K>>(&without_managed_fields(text)).expect("decodes")
    });
    println!(
        "fresh_decode/{what} ({} KB of JSON): whole {:.2} ms, {:.1} MB held at most; without managed fields {:.2} ms, {:.1} MB ({:.0}% of the time, {:.0}% of the heap)",
        text.len() / 1000,
        whole.0,
        whole.1 as f64 / 1e6,
        lean.0,
        lean.1 as f64 / 1e6,
        100.0 * lean.0 / whole.0,
        100.0 * lean.1 as f64 / whole.1 as f64,
    );
}

fn main() {
    let pods = list(include_str!("fixtures/member-pod.json"), "PodList", 192);
    let sets = list(
        include_str!("fixtures/member-statefulset.json"),
        "StatefulSetList",
        64,
    );
    compare::<Pod>("192-member-pods", &pods);
    compare::<StatefulSet>("64-statefulsets", &sets);
}
