//! The four tree shapes, each defined on positions (0 = master, `s + 1` = server `s`):
//! binomial, k-nomial, k-ary and flat.

use crate::Topology;

/// Binomial tree: the k-nomial tree with `k = 2` (the seed's default).
#[derive(Debug, Clone)]
pub struct Binomial(KNomial);

impl Binomial {
    /// A binomial tree over `servers` servers.
    pub fn new(servers: u32) -> Self {
        Self(KNomial::new(servers, 2))
    }
}

impl Topology for Binomial {
    fn size(&self) -> u32 {
        self.0.size()
    }
    fn name(&self) -> String {
        "binomial".into()
    }
    fn parent_position(&self, p: u64) -> Option<u64> {
        self.0.parent_position(p)
    }
    fn child_positions(&self, p: u64) -> Vec<u64> {
        self.0.child_positions(p)
    }
    fn subtree_positions(&self, p: u64) -> Vec<(u64, u64)> {
        self.0.subtree_positions(p)
    }
    fn subtree_range(&self, p: u64) -> Option<(u64, u64)> {
        self.0.subtree_range(p)
    }
    fn for_each_child(&self, p: u64, each: &mut dyn FnMut(u64) -> bool) {
        self.0.for_each_child(p, each)
    }
}

/// k-nomial tree: position `p`'s children are `p + j·k^i` for `1 <= j < k` and every `k^i`
/// below the weight of `p`'s lowest non-zero base-`k` digit; every subtree is one range.
#[derive(Debug, Clone)]
pub struct KNomial {
    servers: u32,
    k: u64,
    /// The smallest power of `k` that is at least the number of positions.
    top: u64,
}

impl KNomial {
    /// A k-nomial tree over `servers` servers; `k` below 2 is taken as 2.
    pub fn new(servers: u32, k: u32) -> Self {
        let k = u64::from(k.max(2));
        let m = u64::from(servers) + 1;
        let mut top = 1u64;
        while top < m {
            top *= k;
        }
        Self { servers, k, top }
    }

    /// Weight `k^t` of `p`'s lowest non-zero digit (`top` for the root).
    fn weight(&self, p: u64) -> u64 {
        if p == 0 {
            return self.top;
        }
        let mut w = 1;
        while (p / w).is_multiple_of(self.k) {
            w *= self.k;
        }
        w
    }
}

impl Topology for KNomial {
    fn size(&self) -> u32 {
        self.servers
    }
    fn name(&self) -> String {
        format!("knomial:{}", self.k)
    }
    fn parent_position(&self, p: u64) -> Option<u64> {
        if p == 0 {
            return None;
        }
        let w = self.weight(p);
        Some(p - ((p / w) % self.k) * w)
    }
    fn child_positions(&self, p: u64) -> Vec<u64> {
        let mut out = Vec::new();
        self.for_each_child(p, &mut |c| {
            out.push(c);
            true
        });
        out
    }
    fn subtree_positions(&self, p: u64) -> Vec<(u64, u64)> {
        vec![(p, (p + self.weight(p)).min(self.positions()))]
    }
    fn subtree_range(&self, p: u64) -> Option<(u64, u64)> {
        Some((p, (p + self.weight(p)).min(self.positions())))
    }
    fn for_each_child(&self, p: u64, each: &mut dyn FnMut(u64) -> bool) {
        let m = self.positions();
        let mut w = self.weight(p) / self.k;
        // Largest subtrees first.
        while w >= 1 {
            for j in 1..self.k {
                let c = p + j * w;
                if c < m && !each(c) {
                    return;
                }
            }
            w /= self.k;
        }
    }
}

/// k-ary tree: position `p`'s children are `k·p + 1 ..= k·p + k`.
#[derive(Debug, Clone)]
pub struct KAry {
    servers: u32,
    k: u64,
}

impl KAry {
    /// A k-ary tree over `servers` servers; `k` below 1 is taken as 1 (a chain).
    pub fn new(servers: u32, k: u32) -> Self {
        Self {
            servers,
            k: u64::from(k.max(1)),
        }
    }
}

impl Topology for KAry {
    fn size(&self) -> u32 {
        self.servers
    }
    fn name(&self) -> String {
        format!("kary:{}", self.k)
    }
    fn parent_position(&self, p: u64) -> Option<u64> {
        (p > 0).then(|| (p - 1) / self.k)
    }
    fn child_positions(&self, p: u64) -> Vec<u64> {
        let m = self.positions();
        (1..=self.k)
            .map(|j| self.k * p + j)
            .filter(|&c| c < m)
            .collect()
    }
    fn subtree_positions(&self, p: u64) -> Vec<(u64, u64)> {
        let m = self.positions();
        if self.k == 1 {
            return vec![(p, m)];
        }
        // Descendants at depth d below p are the range [first, first + k^d).
        let mut out = Vec::new();
        let (mut first, mut width) = (p, 1u64);
        while first < m {
            out.push((first, (first + width).min(m)));
            first = first * self.k + 1;
            width *= self.k;
        }
        out
    }
}

/// Flat tree: every server is a child of the master.
#[derive(Debug, Clone)]
pub struct Flat {
    servers: u32,
}

impl Flat {
    /// A flat tree over `servers` servers.
    pub fn new(servers: u32) -> Self {
        Self { servers }
    }
}

impl Topology for Flat {
    fn size(&self) -> u32 {
        self.servers
    }
    fn name(&self) -> String {
        "flat".into()
    }
    fn parent_position(&self, p: u64) -> Option<u64> {
        (p > 0).then_some(0)
    }
    fn child_positions(&self, p: u64) -> Vec<u64> {
        if p == 0 {
            (1..self.positions()).collect()
        } else {
            Vec::new()
        }
    }
    fn subtree_positions(&self, p: u64) -> Vec<(u64, u64)> {
        vec![self.subtree_range(p).expect("a flat subtree is one range")]
    }
    fn subtree_range(&self, p: u64) -> Option<(u64, u64)> {
        Some(if p == 0 {
            (0, self.positions())
        } else {
            (p, p + 1)
        })
    }
}
