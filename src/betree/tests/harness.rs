//! A fake disk for nodes and a harness that runs the tree beside a `BTreeMap` model.

use crate::betree::{BeTree, DirValue, NodeLoader, TreeStats, Value};
use crate::format::node::{attr_range, name_hash, Key};
use crate::{FsError, Result};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Node blocks by id, as the log and node map would hold them.
#[derive(Default)]
pub struct MemLoader {
    blocks: Mutex<HashMap<u64, Vec<u8>>>,
    /// Sleep this long in every load, so that loads interleave with other threads.
    pub delay: Option<Duration>,
    pub loads: AtomicU64,
    /// Fail every load while set (an I/O error).
    pub failing: AtomicBool,
}

impl NodeLoader for MemLoader {
    fn load_node(&self, id: u64) -> Result<Vec<u8>> {
        if let Some(delay) = self.delay {
            std::thread::sleep(delay);
        }
        if self.failing.load(Ordering::SeqCst) {
            return Err(FsError::Io(std::io::Error::other("injected read error")));
        }
        self.loads.fetch_add(1, Ordering::Relaxed);
        self.blocks
            .lock()
            .get(&id)
            .cloned()
            .ok_or_else(|| FsError::corrupt("test disk", format!("no block for node {id}")))
    }
}

impl MemLoader {
    pub fn with_delay(delay: Duration) -> MemLoader {
        MemLoader {
            delay: Some(delay),
            ..MemLoader::default()
        }
    }

    /// Write out what the tree has dirty, as the log writer would; returns the node count.
    pub fn persist(&self, tree: &BeTree) -> usize {
        let dirty = tree.take_dirty();
        for (_, block) in &dirty.nodes {
            assert_eq!(block.len(), tree.block_size() as usize);
        }
        let ids = self.store(dirty.nodes, &dirty.freed);
        tree.written(&ids);
        ids.len()
    }

    /// Apply one batch of the log writer: drop freed nodes, store written ones.
    pub fn store(&self, nodes: Vec<(u64, Vec<u8>)>, freed: &[u64]) -> Vec<u64> {
        let ids: Vec<u64> = nodes.iter().map(|(id, _)| *id).collect();
        let mut blocks = self.blocks.lock();
        for id in freed {
            assert!(
                !ids.contains(id),
                "node {id} written and freed in one batch"
            );
            blocks.remove(id);
        }
        blocks.extend(nodes);
        ids
    }

    /// Corrupt the disk: each of two nodes' ids now leads to the other's block.
    pub fn swap_blocks(&self, a: u64, b: u64) {
        let mut blocks = self.blocks.lock();
        let block_a = blocks.remove(&a).unwrap();
        let block_b = blocks.insert(b, block_a).unwrap();
        blocks.insert(a, block_b);
    }

    /// Ids below `next` without a block: what the node map would call free.
    pub fn free_ids(&self, next: u64) -> Vec<u64> {
        let blocks = self.blocks.lock();
        (2..next).filter(|id| !blocks.contains_key(id)).collect()
    }

    pub fn block_count(&self) -> usize {
        self.blocks.lock().len()
    }

    pub fn ids(&self) -> std::collections::BTreeSet<u64> {
        self.blocks.lock().keys().copied().collect()
    }

    pub fn loads(&self) -> u64 {
        self.loads.load(Ordering::Relaxed)
    }
}

/// How keys get their hash.
#[derive(Clone, Copy, Debug)]
pub enum Hashing {
    /// The real name hash.
    Real,
    /// The real hash modulo this: plenty of collisions, long pivots.
    Colliding(u64),
}

pub const SEED: u64 = 0x5eed_0fd1_5ec7;

/// The tree, its disk, and a model of what it should contain.
pub struct Harness {
    pub tree: BeTree,
    pub disk: MemLoader,
    pub model: BTreeMap<(u64, u64, Vec<u8>), DirValue>,
    /// Attributes by (inode, name), of the inode's current generation.
    pub attrs: BTreeMap<(u64, Vec<u8>), Vec<u8>>,
    /// Each inode's generation (bumped when all its attributes are dropped, as freeing an
    /// inode does: a dropped range is never written again).
    pub generations: HashMap<u64, u32>,
    /// A range delete was applied (see `model::drain`).
    pub ranges_used: bool,
    pub block_size: u32,
    pub cache_bytes: u64,
    pub hashing: Hashing,
}

impl Harness {
    pub fn new(block_size: u32, cache_bytes: u64, hashing: Hashing) -> Harness {
        Harness {
            tree: BeTree::new_empty(block_size, SEED, cache_bytes),
            disk: MemLoader::default(),
            model: BTreeMap::new(),
            attrs: BTreeMap::new(),
            generations: HashMap::new(),
            ranges_used: false,
            block_size,
            cache_bytes,
            hashing,
        }
    }

    pub fn hash(&self, name: &[u8]) -> u64 {
        match self.hashing {
            Hashing::Real => name_hash(SEED, name),
            Hashing::Colliding(m) => name_hash(SEED, name) % m,
        }
    }

    fn key(&self, dir: u64, name: &[u8]) -> Key {
        Key::new(dir, self.hash(name), name)
    }

    pub fn insert(&mut self, dir: u64, name: &[u8], value: DirValue) {
        let key = self.key(dir, name);
        match self.hashing {
            Hashing::Real => self.tree.insert(&self.disk, dir, name, value).unwrap(),
            Hashing::Colliding(_) => self
                .tree
                .insert_key(&self.disk, key.clone(), value)
                .unwrap(),
        }
        self.model.insert((dir, key.hash, name.to_vec()), value);
    }

    pub fn remove(&mut self, dir: u64, name: &[u8]) {
        let key = self.key(dir, name);
        match self.hashing {
            Hashing::Real => self.tree.remove(&self.disk, dir, name).unwrap(),
            Hashing::Colliding(_) => self.tree.remove_key(&self.disk, key.clone()).unwrap(),
        }
        self.model.remove(&(dir, key.hash, name.to_vec()));
    }

    pub fn check_lookup(&self, dir: u64, name: &[u8]) {
        let key = self.key(dir, name);
        let got = match self.hashing {
            Hashing::Real => self.tree.lookup(&self.disk, dir, name).unwrap(),
            Hashing::Colliding(_) => self.tree.lookup_key(&self.disk, &key).unwrap(),
        };
        let want = self.model.get(&(dir, key.hash, name.to_vec())).copied();
        assert_eq!(
            got,
            want,
            "lookup of {dir}/{:?}",
            String::from_utf8_lossy(name)
        );
    }

    /// What `scan` must return, from the model.
    pub fn expected_scan(
        &self,
        dir: u64,
        start_hash: u64,
        max: usize,
    ) -> Vec<(u64, Vec<u8>, DirValue)> {
        let mut out: Vec<(u64, Vec<u8>, DirValue)> = Vec::new();
        if max == 0 {
            return out;
        }
        for ((d, hash, name), value) in self.model.range((dir, start_hash, Vec::new())..) {
            if *d != dir || (out.len() >= max && out.last().unwrap().0 != *hash) {
                break;
            }
            out.push((*hash, name.clone(), *value));
        }
        out
    }

    pub fn check_scan(&self, dir: u64, start_hash: u64, max: usize) {
        let got: Vec<(u64, Vec<u8>, DirValue)> = self
            .tree
            .scan(&self.disk, dir, start_hash, max)
            .unwrap()
            .into_iter()
            .map(|item| (item.hash, item.name, item.value))
            .collect();
        assert_eq!(
            got,
            self.expected_scan(dir, start_hash, max),
            "scan {dir} from {start_hash:#x} max {max}"
        );
    }

    fn generation(&self, ino: u64) -> u32 {
        self.generations.get(&ino).copied().unwrap_or(1)
    }

    /// Set attribute `name` of `ino` (replacing it, and freeing the blocks it had).
    pub fn set_attr(&mut self, ino: u64, name: &[u8], value: Vec<u8>) {
        let key = self.tree.attr_key(ino, self.generation(ino), name);
        let old = self.tree.attr_get(&self.disk, &key).unwrap();
        let replaced = old.as_ref().map(|a| a.ids().to_vec()).unwrap_or_default();
        self.tree
            .attr_set(&self.disk, key, ino, &value, &replaced)
            .unwrap();
        self.attrs.insert((ino, name.to_vec()), value);
    }

    pub fn remove_attr(&mut self, ino: u64, name: &[u8]) {
        let key = self.tree.attr_key(ino, self.generation(ino), name);
        let old = self.tree.attr_get(&self.disk, &key).unwrap();
        let replaced = old.as_ref().map(|a| a.ids().to_vec()).unwrap_or_default();
        self.tree.attr_remove(&self.disk, key, &replaced).unwrap();
        self.attrs.remove(&(ino, name.to_vec()));
    }

    /// Drop every attribute of `ino` with one range message, as freeing the inode does.
    pub fn drop_attrs(&mut self, ino: u64) {
        let (lower, upper) = attr_range(ino, self.generation(ino));
        let ids: Vec<u64> = self
            .tree
            .attr_scan(&self.disk, &lower, &upper)
            .unwrap()
            .iter()
            .flat_map(|(_, a)| a.ids().to_vec())
            .collect();
        self.tree
            .delete_range(&self.disk, lower, upper, &ids)
            .unwrap();
        self.attrs.retain(|(i, _), _| *i != ino);
        *self.generations.entry(ino).or_insert(1) += 1;
        self.ranges_used = true;
    }

    pub fn check_attr(&self, ino: u64, name: &[u8]) {
        let key = self.tree.attr_key(ino, self.generation(ino), name);
        let got = self.tree.attr_read(&self.disk, &key).unwrap();
        assert_eq!(
            got.as_deref(),
            self.attrs.get(&(ino, name.to_vec())).map(|v| &v[..]),
            "attribute {ino}/{}",
            String::from_utf8_lossy(name)
        );
    }

    /// The attributes of `ino` the tree lists must be the model's.
    pub fn check_attr_scan(&self, ino: u64) {
        let (lower, upper) = attr_range(ino, self.generation(ino));
        let got: Vec<Vec<u8>> = self
            .tree
            .attr_scan(&self.disk, &lower, &upper)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k.name.to_vec())
            .collect();
        let mut got_sorted = got.clone();
        got_sorted.sort();
        let want: Vec<Vec<u8>> = self
            .attrs
            .keys()
            .filter(|(i, _)| *i == ino)
            .map(|(_, n)| n.clone())
            .collect();
        assert_eq!(got_sorted, want, "attributes of {ino}");
    }

    /// Compare the whole tree with the model and run the checker.
    pub fn check_all(&self) -> TreeStats {
        let mut all = Vec::with_capacity(self.model.len());
        let mut attrs = Vec::new();
        self.tree
            .for_each(&self.disk, &mut |dir, hash, name, value| match value {
                Value::Entry(v) => all.push(((dir, hash, name.to_vec()), *v)),
                Value::Attr(_) => attrs.push((dir, name.to_vec())),
            })
            .unwrap();
        attrs.sort();
        let want_attrs: Vec<(u64, Vec<u8>)> = self.attrs.keys().cloned().collect();
        assert_eq!(attrs, want_attrs, "attributes listed differ from the model");
        for (ino, name) in self.attrs.keys() {
            self.check_attr(*ino, name);
        }
        let want: Vec<_> = self.model.iter().map(|(k, v)| (k.clone(), *v)).collect();
        if all != want {
            let first_diff = all.iter().zip(&want).position(|(a, b)| a != b);
            panic!(
                "for_each differs from the model: {} vs {} entries, first difference at {:?}",
                all.len(),
                want.len(),
                first_diff
            );
        }
        self.tree.check(&self.disk).unwrap()
    }

    pub fn persist(&self) -> usize {
        self.disk.persist(&self.tree)
    }

    /// After a write-out the disk holds exactly the reachable nodes and the value blocks of
    /// live attributes: nothing leaked, nothing freed too early.
    pub fn check_no_leaks(&self) {
        self.persist();
        let mut want: std::collections::BTreeSet<u64> = self
            .tree
            .check(&self.disk)
            .unwrap()
            .node_ids
            .into_iter()
            .collect();
        self.tree
            .for_each(&self.disk, &mut |_, _, _, value| {
                if let Value::Attr(a) = value {
                    want.extend(a.ids().iter().copied());
                }
            })
            .unwrap();
        let have = self.disk.ids();
        assert_eq!(have, want, "blocks on disk vs what the tree reaches");
    }

    /// Write everything out and start over from the disk with an empty cache.
    pub fn reopen(&mut self) {
        self.persist();
        let next = self.tree.next_node_id();
        self.tree = BeTree::open(
            self.block_size,
            SEED,
            self.cache_bytes,
            next,
            self.disk.free_ids(next),
        );
        assert_eq!(self.tree.cached_bytes(), 0);
    }
}

/// A distinct name for every index: a hex prefix and a '.', then filler of varied length,
/// sometimes long, sometimes non-ASCII.
pub fn name_of(i: u32) -> Vec<u8> {
    let mut name = format!("{i:x}.").into_bytes();
    let filler = if i % 97 == 0 {
        180 + (i as usize % 70)
    } else {
        (i as usize * 7919) % 40
    };
    let byte = match i % 5 {
        0 => 0xff,
        1 => 0x01,
        _ => b'a' + (i % 26) as u8,
    };
    name.resize((name.len() + filler).min(255), byte);
    name
}

/// An attribute value of `len` bytes that differs for each salt.
pub fn attr_value_of(len: usize, salt: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(salt) as u8)
        .collect()
}

/// Attribute value lengths worth trying: empty, inline up to its limit with 4 KiB blocks,
/// just past it, one block, several, and the largest.
pub const ATTR_LENS: [usize; 8] = [0, 12, 256, 257, 4056, 4057, 20_000, 65536];

pub fn value_of(i: u32, salt: u32) -> DirValue {
    DirValue {
        ino: (i as u64) << 8 | (salt as u64 & 0xff),
        kind: 1 + ((i + salt) % 7) as u8,
    }
}
