//! TEMPORARY in-memory stand-in with the agreed API (replaced by the real B-epsilon tree).
use crate::Result;
use parking_lot::RwLock;
use std::collections::BTreeMap;

pub trait NodeLoader: Send + Sync {
    fn load_node(&self, id: u64) -> Result<Vec<u8>>;
}
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirValue {
    pub ino: u64,
    pub kind: u8,
}
#[derive(Clone, Debug)]
pub struct ScanItem {
    pub hash: u64,
    pub name: Vec<u8>,
    pub value: DirValue,
}
pub struct DirtyNodes {
    pub nodes: Vec<(u64, Vec<u8>)>,
    pub freed: Vec<u64>,
}
#[derive(Debug, Default)]
pub struct TreeStats {
    pub entries: u64,
    /// Node ids reachable from the root (the stand-in keeps no nodes).
    pub reachable: Vec<u64>,
}

pub struct BeTree {
    map: RwLock<BTreeMap<(u64, u64, Vec<u8>), DirValue>>,
    seed: u64,
}

impl BeTree {
    pub fn new_empty(_bs: u32, seed: u64, _c: u64) -> BeTree {
        BeTree {
            map: RwLock::new(BTreeMap::new()),
            seed,
        }
    }
    pub fn open(
        _bs: u32,
        seed: u64,
        _c: u64,
        _n: u64,
        _f: impl IntoIterator<Item = u64>,
    ) -> BeTree {
        Self::new_empty(0, seed, 0)
    }
    pub fn hash(&self, name: &[u8]) -> u64 {
        use std::hash::Hasher;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        h.write_u64(self.seed);
        h.write(name);
        h.finish() >> 2
    }
    pub fn lookup(&self, _ld: &dyn NodeLoader, dir: u64, name: &[u8]) -> Result<Option<DirValue>> {
        Ok(self
            .map
            .read()
            .get(&(dir, self.hash(name), name.to_vec()))
            .copied())
    }
    pub fn insert(&self, _ld: &dyn NodeLoader, dir: u64, name: &[u8], v: DirValue) -> Result<()> {
        self.map
            .write()
            .insert((dir, self.hash(name), name.to_vec()), v);
        Ok(())
    }
    pub fn remove(&self, _ld: &dyn NodeLoader, dir: u64, name: &[u8]) -> Result<()> {
        self.map
            .write()
            .remove(&(dir, self.hash(name), name.to_vec()));
        Ok(())
    }
    pub fn scan(
        &self,
        _ld: &dyn NodeLoader,
        dir: u64,
        start_hash: u64,
        max: usize,
    ) -> Result<Vec<ScanItem>> {
        let m = self.map.read();
        let mut v: Vec<ScanItem> = Vec::new();
        for ((_, h, n), val) in m.range((dir, start_hash, Vec::new())..(dir + 1, 0, Vec::new())) {
            if v.len() >= max && v.last().unwrap().hash != *h {
                break;
            }
            v.push(ScanItem {
                hash: *h,
                name: n.clone(),
                value: *val,
            });
        }
        Ok(v)
    }
    pub fn for_each(
        &self,
        _ld: &dyn NodeLoader,
        f: &mut dyn FnMut(u64, u64, &[u8], DirValue),
    ) -> Result<()> {
        for ((d, h, n), v) in self.map.read().iter() {
            f(*d, *h, n, *v)
        }
        Ok(())
    }
    pub fn take_dirty(&self) -> DirtyNodes {
        DirtyNodes {
            nodes: vec![],
            freed: vec![],
        }
    }
    pub fn written(&self, _ids: &[u64]) {}
    pub fn mark_dirty(&self, _ld: &dyn NodeLoader, _id: u64) -> Result<()> {
        Ok(())
    }
    pub fn next_node_id(&self) -> u64 {
        2
    }
    pub fn dirty_count(&self) -> usize {
        0
    }
    pub fn freed_count(&self) -> usize {
        0
    }
    pub fn cached_bytes(&self) -> u64 {
        0
    }
    pub fn check(&self, _ld: &dyn NodeLoader) -> Result<TreeStats> {
        Ok(TreeStats {
            entries: self.map.read().len() as u64,
            ..Default::default()
        })
    }
}
