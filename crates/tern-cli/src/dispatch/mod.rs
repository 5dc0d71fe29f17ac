//! QingNiao's L7 dispatch: `tern dispatch check|serve|load|gen-rules`, `tern bench dispatch`, the
//! server's metrics and the benchmark's figures.

pub mod bench;
pub mod metrics;
pub mod plot;
pub mod rules;
pub mod serve;
