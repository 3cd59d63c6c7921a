//! kubesim: the simulated machines of the end-to-end tests.
//!
//! - [`sim`]: the `kubesim` binary's runtime. It plays every node's kubelet (Node
//!   registration, Lease renewal, Pods run as `celld-stub` processes on loopback IPs, Pod
//!   status, graceful deletion) and the disk provisioner (zone-pinned PVs for
//!   WaitForFirstConsumer claims), against a real API server, with a fault-injection
//!   control API.
//! - [`stub`]: the `celld-stub` binary: what the healer reads from a celld member.
//! - [`control`]: the control API's types and client.
//! - [`testing`]: helpers for e2e test crates (cluster gate, spawning kubesim, waits).
//! - [`objects`], [`ipalloc`]: the pure parts (object construction, IP allocation).

pub mod control;
pub mod http;
pub mod ipalloc;
pub mod objects;
pub mod sim;
pub mod stub;
pub mod testing;
