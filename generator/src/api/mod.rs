//! The fleet API: our two custom resources, their defaults and the keys we write.

#[cfg(test)]
pub(crate) mod bounds_table;
pub mod cel;
pub mod defaults;
pub mod fleet;
pub mod labels;
pub mod reservation;
pub mod status;

pub use fleet::*;
pub use reservation::{CelldBucketReservation, CelldBucketReservationSpec, reservation_name};
pub use status::*;
