//! The fleet API: our two custom resources, their defaults and the keys we write.

pub mod defaults;
pub mod fleet;
pub mod labels;
pub mod reservation;
pub mod status;

pub use fleet::*;
pub use reservation::{CelldBucketReservation, CelldBucketReservationSpec, reservation_name};
pub use status::*;
