//! kubesim
