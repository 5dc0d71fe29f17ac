//! `tern switch` and `tern bench switch`: CLIP (seed 004), a switch extended by servers
//! (docs/clip.md).

pub mod bench;
pub mod control;
pub mod inspect;
pub mod plot;
pub mod report;
pub mod serve;
pub mod server;
pub mod snatbench;
