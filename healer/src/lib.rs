//! The healer: observe -> decide (pure) -> act.
