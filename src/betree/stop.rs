//! Why a walk over the cached tree stopped short: a node to load first, or an error — among
//! them a child that does not sit one level below its parent, which every walk checks.

use super::node::Node;
use crate::FsError;

/// Why a mutation or a read stopped before finishing.
#[derive(Debug)]
pub(crate) enum Stop {
    /// Node `id` must be loaded first; run again afterwards.
    Miss(u64),
    Fail(FsError),
}

impl From<FsError> for Stop {
    fn from(e: FsError) -> Stop {
        Stop::Fail(e)
    }
}

/// A child met on the way down must be a tree node one level below its parent; anything
/// else is a corrupt tree, not a miss to retry.
pub(crate) fn check_child_level(id: u64, node: &Node, parent_level: u8) -> Result<(), FsError> {
    if node.is_value() {
        return Err(FsError::corrupt(
            "tree node",
            format!("node {id} is a value block but sits in the tree"),
        ));
    }
    if parent_level == 0 || node.level() != parent_level - 1 {
        return Err(FsError::corrupt(
            "tree node",
            format!(
                "node {id} has level {} under a node of level {parent_level}",
                node.level()
            ),
        ));
    }
    Ok(())
}
