//! The rules `decide` applies, by the names `docs/healer-rules.md` gives them. Every plan
//! names the rule behind it ([`crate::Plan::rule`]); logs print it (`rule=G3`), and
//! tests, the simulation's mutation checks and the runtime match on the variant, never
//! on a string.

use std::fmt;

/// One rule of `docs/healer-rules.md`. The families: T (trusted clock), H (handoff
/// resolution), V (validity), D (deletion), K (capacity), P, I, W (gates: pause,
/// infrastructure, workload), F (force delete), G (growth), C (contraction), R (disk
/// replacement), S (status when nothing is written).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[allow(missing_docs)] // Each variant is its name; the page says what it does.
pub enum Rule {
    T1,
    T2,
    H1,
    H2,
    H3,
    H4,
    H5,
    H6,
    V1,
    V2,
    V3,
    D1,
    D2,
    D3,
    D4,
    D5,
    D6,
    D7,
    D8,
    K6,
    P1,
    I1,
    W1,
    W2,
    W3,
    W4,
    W5,
    W6,
    F1,
    F2,
    G1,
    G2,
    G3,
    G4,
    G5,
    C1,
    C2,
    C3,
    R1,
    R2,
    R3,
    R6,
    R7,
    R8,
    R9,
    S1,
    S2,
    S3,
}

impl Rule {
    /// The rule's name, as `docs/healer-rules.md` and the logs write it.
    pub fn name(self) -> &'static str {
        use Rule::*;
        match self {
            T1 => "T1",
            T2 => "T2",
            H1 => "H1",
            H2 => "H2",
            H3 => "H3",
            H4 => "H4",
            H5 => "H5",
            H6 => "H6",
            V1 => "V1",
            V2 => "V2",
            V3 => "V3",
            D1 => "D1",
            D2 => "D2",
            D3 => "D3",
            D4 => "D4",
            D5 => "D5",
            D6 => "D6",
            D7 => "D7",
            D8 => "D8",
            K6 => "K6",
            P1 => "P1",
            I1 => "I1",
            W1 => "W1",
            W2 => "W2",
            W3 => "W3",
            W4 => "W4",
            W5 => "W5",
            W6 => "W6",
            F1 => "F1",
            F2 => "F2",
            G1 => "G1",
            G2 => "G2",
            G3 => "G3",
            G4 => "G4",
            G5 => "G5",
            C1 => "C1",
            C2 => "C2",
            C3 => "C3",
            R1 => "R1",
            R2 => "R2",
            R3 => "R3",
            R6 => "R6",
            R7 => "R7",
            R8 => "R8",
            R9 => "R9",
            S1 => "S1",
            S2 => "S2",
            S3 => "S3",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::Rule::{self, *};

    const ALL: [Rule; 48] = [
        T1, T2, H1, H2, H3, H4, H5, H6, V1, V2, V3, D1, D2, D3, D4, D5, D6, D7, D8, K6, P1, I1, W1,
        W2, W3, W4, W5, W6, F1, F2, G1, G2, G3, G4, G5, C1, C2, C3, R1, R2, R3, R6, R7, R8, R9, S1,
        S2, S3,
    ];

    /// Every rule is written as its variant is named, and the page documents it under
    /// that name.
    #[test]
    fn every_rule_is_documented_under_its_name() {
        let page = include_str!("../../docs/healer-rules.md");
        for r in ALL {
            assert_eq!(format!("{r:?}"), r.name());
            assert_eq!(r.to_string(), r.name());
            assert!(
                page.contains(r.name()),
                "rule {r} is not in docs/healer-rules.md"
            );
        }
    }
}
