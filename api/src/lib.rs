//! celld-api: what `celld-gen` and `celld-healer` must agree on. The fleet API (our two
//! custom resources, their defaults, limits and the keys we write), the validation of a
//! fleet spec, the healer's flags and the RBAC it needs.

pub mod bounds_table;
pub mod cel;
pub mod defaults;
pub mod diagnostic;
pub mod fleet;
pub mod healer_flags;
pub mod labels;
pub mod rbac;
pub mod reservation;
pub mod status;
pub mod url;
pub mod validate;

pub use fleet::*;
pub use reservation::{CelldBucketReservation, CelldBucketReservationSpec, reservation_name};
pub use status::*;
