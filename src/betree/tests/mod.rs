//! Tests of the tree as a whole (node-local and format tests sit beside their code).

mod concurrency;
mod harness;
mod model;
mod mutators;
mod scale;
mod unit;
