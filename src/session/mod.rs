//! DualFS's own FUSE session layer: the kernel ABI (`abi`), request decoding (`request`),
//! reply encoding (`reply`) and INIT negotiation (`init`).

pub mod abi;
pub mod init;
pub mod reply;
pub mod request;

pub use init::{InitConfig, Negotiated};
pub use reply::{Answer, DirBuf, Reply};
pub use request::{Operation, Request};

#[cfg(test)]
mod tests;
