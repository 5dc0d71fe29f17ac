//! `tern hw report`: a configuration of any engine projected onto a hardware profile.

use std::path::PathBuf;

use clap::Args;

use crate::CmdResult;

/// `tern hw report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A dispatch rule file (QingNiao), a flow switch config (AccelSDP), an RPC service config
    /// (RpcNIC, `examples/rpc/image.toml`), a SuperNIC tenant file (`examples/chain/`) or a CLIP
    /// switch configuration (`examples/switch/serve.toml`), told apart by content.
    pub config: PathBuf,
    /// More tenant files planned beside a tenant file (they share task instances and regions).
    #[arg(long = "with")]
    pub with: Vec<PathBuf>,
    /// Hardware profile (built-in name or TOML file). Default: qingniao-u250 for a dispatch
    /// rule file; for a flow config, its own profile, or accelsdp-n3000 if that is `cpu`; for an
    /// RPC service config, its own profile; supernic-htg9200 for tenant files; clip-tofino for a
    /// switch configuration.
    #[arg(long)]
    pub profile: Option<String>,
    /// Packets per request in the projection (dispatch).
    #[arg(long, default_value_t = 1)]
    pub packets: u32,
    /// Bytes per frame (Ethernet header to the end of the payload) in the projection
    /// (default 128 for dispatch; 64 and 1500 for flow; 64 for a switch).
    #[arg(long)]
    pub frame_bytes: Option<u32>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `tern hw report`: hands the file to the engine whose configuration it is, told by its
/// keys (the file read and parsed once here; one that cannot be read or is not TOML goes to
/// the dispatch report, whose error names it).
pub fn report(a: &ReportArgs) -> CmdResult {
    let table = tern_wire::read_regular_text(&a.config, tern_wire::MAX_CONFIG_BYTES)
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok())
        .unwrap_or_default();
    if crate::flow::is_flow_config(&table) {
        return crate::flow::report(a);
    }
    if tern_rpc::service::is_service_table(&table) {
        return crate::rpc::report::report(a);
    }
    if crate::chain::report::is_tenant_file(&table) {
        return crate::chain::report::report(a);
    }
    if crate::switch::report::is_switch_config(&table) {
        return crate::switch::report::report(a);
    }
    if !a.with.is_empty() {
        return Err("--with is for tenant files (SuperNIC)".into());
    }
    crate::dispatch::rules::report(a)
}
