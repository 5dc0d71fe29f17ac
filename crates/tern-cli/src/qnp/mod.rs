//! QNP, the request protocol: `tern dispatch pingpong` and `tern bench qnp`.

pub mod bench;
pub mod pingpong;
