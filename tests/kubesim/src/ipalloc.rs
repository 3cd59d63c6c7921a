//! Pod IP allocation on the loopback network.
//!
//! Linux routes all of 127.0.0.0/8 to `lo`, so every simulated Pod gets its own address and
//! its stub binds ports 8080 and 8081 there without clashing with any other Pod. Addresses
//! are handed out round-robin (a cursor that moves on), so a freed address is reused as late
//! as possible, and never `127.0.0.1`, a `.0` or a `.255` host.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::str::FromStr;

use anyhow::{Result, bail};

/// An IPv4 network given as `a.b.c.d/len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub base: Ipv4Addr,
    pub len: u8,
}

impl Cidr {
    pub fn size(&self) -> u64 {
        1u64 << (32 - u32::from(self.len))
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = if self.len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.len))
        };
        u32::from(ip) & mask == u32::from(self.base) & mask
    }

    /// The `i`-th address of the network (0 = network address).
    pub fn nth(&self, i: u64) -> Option<Ipv4Addr> {
        (i < self.size()).then(|| Ipv4Addr::from(u32::from(self.base) + i as u32))
    }
}

impl FromStr for Cidr {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        let Some((ip, len)) = s.split_once('/') else {
            bail!("{s:?} is not a CIDR (expected a.b.c.d/len)");
        };
        let ip: Ipv4Addr = ip.parse()?;
        let len: u8 = len.parse()?;
        if !(8..=30).contains(&len) {
            bail!("{s:?}: prefix length must be between 8 and 30");
        }
        let mask = u32::MAX << (32 - u32::from(len));
        if u32::from(ip) & mask != u32::from(ip) {
            bail!("{s:?}: host bits are set");
        }
        Ok(Cidr { base: ip, len })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.base, self.len)
    }
}

/// Whether an address may be handed to a Pod or node at all.
pub fn usable(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    ip != Ipv4Addr::new(127, 0, 0, 1) && o[3] != 0 && o[3] != 255
}

#[derive(Debug)]
pub struct IpAllocator {
    cidr: Cidr,
    cursor: u64,
    used: BTreeSet<Ipv4Addr>,
}

impl IpAllocator {
    pub fn new(cidr: Cidr) -> Result<Self> {
        if !cidr.contains(Ipv4Addr::new(127, 0, 0, 1)) && cidr.base.octets()[0] != 127 {
            bail!("{cidr} is not on the loopback network 127.0.0.0/8");
        }
        Ok(Self {
            cidr,
            cursor: 0,
            used: BTreeSet::new(),
        })
    }

    pub fn cidr(&self) -> Cidr {
        self.cidr
    }

    pub fn in_use(&self) -> usize {
        self.used.len()
    }

    /// The next free usable address after the cursor, wrapping around once.
    pub fn allocate(&mut self) -> Option<Ipv4Addr> {
        let size = self.cidr.size();
        for step in 1..=size {
            let i = (self.cursor + step) % size;
            let ip = self.cidr.nth(i)?;
            if usable(ip) && !self.used.contains(&ip) {
                self.cursor = i;
                self.used.insert(ip);
                return Some(ip);
            }
        }
        None
    }

    /// Takes a specific address (a Pod that already had it before kubesim restarted).
    /// Returns false if it is outside the range, unusable or taken.
    pub fn reserve(&mut self, ip: Ipv4Addr) -> bool {
        if !self.cidr.contains(ip) || !usable(ip) || self.used.contains(&ip) {
            return false;
        }
        self.used.insert(ip);
        true
    }

    pub fn release(&mut self, ip: Ipv4Addr) {
        self.used.remove(&ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(cidr: &str) -> IpAllocator {
        IpAllocator::new(cidr.parse().unwrap()).unwrap()
    }

    #[test]
    fn parses_and_rejects_cidrs() {
        let c: Cidr = "127.20.0.0/16".parse().unwrap();
        assert_eq!(c.size(), 65536);
        assert!(c.contains(Ipv4Addr::new(127, 20, 255, 1)));
        assert!(!c.contains(Ipv4Addr::new(127, 21, 0, 1)));
        assert!("127.20.0.1/16".parse::<Cidr>().is_err(), "host bits");
        assert!("127.20.0.0".parse::<Cidr>().is_err());
        assert!("127.20.0.0/31".parse::<Cidr>().is_err());
        assert!(IpAllocator::new("10.0.0.0/24".parse().unwrap()).is_err());
    }

    #[test]
    fn never_hands_out_localhost_network_or_broadcast_hosts() {
        let mut a = alloc("127.0.0.0/24");
        let mut got = Vec::new();
        while let Some(ip) = a.allocate() {
            got.push(ip);
        }
        // .0, .1 (127.0.0.1) and .255 are skipped.
        assert_eq!(got.len(), 253);
        assert!(!got.contains(&Ipv4Addr::new(127, 0, 0, 1)));
        assert!(!got.contains(&Ipv4Addr::new(127, 0, 0, 0)));
        assert!(!got.contains(&Ipv4Addr::new(127, 0, 0, 255)));
        assert_eq!(got[0], Ipv4Addr::new(127, 0, 0, 2));
    }

    #[test]
    fn round_robin_reuses_freed_addresses_last() {
        let mut a = alloc("127.20.0.0/24");
        let first = a.allocate().unwrap();
        let second = a.allocate().unwrap();
        assert_eq!(first, Ipv4Addr::new(127, 20, 0, 1));
        assert_eq!(second, Ipv4Addr::new(127, 20, 0, 2));
        a.release(first);
        let third = a.allocate().unwrap();
        assert_eq!(
            third,
            Ipv4Addr::new(127, 20, 0, 3),
            "freed address not reused at once"
        );
        // Exhaust the rest: the freed one comes back only at the end.
        let mut last = third;
        while let Some(ip) = a.allocate() {
            last = ip;
        }
        assert_eq!(last, first);
        assert_eq!(a.in_use(), 254);
        assert_eq!(a.allocate(), None);
    }

    #[test]
    fn reserve_takes_specific_addresses() {
        let mut a = alloc("127.20.0.0/16");
        assert!(a.reserve(Ipv4Addr::new(127, 20, 3, 7)));
        assert!(!a.reserve(Ipv4Addr::new(127, 20, 3, 7)), "already taken");
        assert!(
            !a.reserve(Ipv4Addr::new(127, 21, 0, 1)),
            "outside the range"
        );
        assert!(!a.reserve(Ipv4Addr::new(127, 20, 3, 0)), "unusable");
        a.release(Ipv4Addr::new(127, 20, 3, 7));
        assert!(a.reserve(Ipv4Addr::new(127, 20, 3, 7)));
    }
}
